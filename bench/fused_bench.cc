// A gradient list through one collective: all_reduce of a std::vector of 100 float32 tensors of
// 1 KiB each against all_reduce of one 100 KiB tensor, for each replica count N (MirroredStrategy
// over CPU:0..N-1). Both are timed as K all_reduces inside one run; the ratio list / single shows
// what the per-tensor overhead costs. Beside them, the part of that overhead no engine can avoid:
// one thread making the list's 100 output Tensors (views of one block, their references taken
// with one atomic add, as all_reduce makes them) and dropping them, each on its own as a user
// drops them, inside a ReleaseBatch as a replica's step does. Each replica pays it, and the
// replicas sharing a core pay it one after the other, so "floor" = (single + ceil(N / cores) x
// handles) / single is a ratio no engine can beat. Above the table, all the work two replicas
// cannot avoid: the list and the tensor all_reduced by a bare two-thread program (see
// BareTwoThreads), whose ratio is about the lowest 2 replicas can reach on this machine.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "device/kernels.h"
#include "device/storage.h"
#include "distribute/device/internal/tensor_views.h"
#include "replica_bench.h"

namespace distribute::bench {
namespace {

constexpr int kTensors = 100;
constexpr std::int64_t kElementsPerTensor = 256;  // 1 KiB of float32

float input_value(int replica, std::int64_t i) { return static_cast<float>(static_cast<int>(i % 5) + replica); }

float expected_sum(int n, std::int64_t i) { return static_cast<float>(n * static_cast<int>(i % 5) + n * (n - 1) / 2); }

Tensor make_tensor(std::int64_t count, std::int64_t first, int replica, const Device& device) {
  Tensor t = Tensor::empty(DType::kFloat32, Shape{count}, device);
  float* data = t.data<float>();
  for (std::int64_t i = 0; i < count; ++i) data[i] = input_value(replica, first + i);
  return t;
}

Tensor make_tensor(std::int64_t count, std::int64_t first, const ReplicaContext& ctx) {
  return make_tensor(count, first, ctx.replica_id_in_sync_group(), ctx.device());
}

// Wrong elements of `t`, whose element i is the sum of input element first + i.
std::int64_t count_wrong(const Tensor& t, std::int64_t first, int n) {
  const float* data = t.data<float>();
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < t.num_elements(); ++i) bad += data[i] != expected_sum(n, first + i) ? 1 : 0;
  return bad;
}

// Per op: a new list of the 100 output handles replaces the previous one, which is dropped.
Timing time_handles(const Options& options) {
  const std::size_t tensor_bytes = kElementsPerTensor * sizeof(float);
  const detail::StorageRef block = detail::allocate_storage(Device::cpu(), kTensors * tensor_bytes);
  const Shape shape{kElementsPerTensor};
  const int ops = ops_per_unit(kTensors * tensor_bytes, options);
  std::vector<Tensor> handles;
  return time_unit(
      [&] {
        detail::ReleaseBatch batch;
        for (int k = 0; k < ops; ++k) {
          detail::TensorViews views(block, kTensors);
          std::vector<Tensor> list;
          list.reserve(kTensors);
          for (int t = 0; t < kTensors; ++t) {
            list.push_back(views.make(static_cast<std::size_t>(t) * tensor_bytes, DType::kFloat32, shape));
          }
          handles = std::move(list);
        }
      },
      ops, options);
}

// The list and the single tensor all_reduced by a bare program of two threads, each with its
// inputs on its own CPU device. Per operation, each thread reads its inputs' pointers and sizes,
// takes an output block from its device's pool, meets the other, reduces a fixed half of the
// leaves (of the elements, for one tensor) with the library's kernel into its block and copies
// that half into the other's, meets it again, and makes its list of output views, dropping the
// previous one. That is the work any implementation of all_reduce must do for 2 replicas, with
// the library's pool, kernel and tensor handles; everything else the library does (comparing the
// calls, claiming and stealing chunks, handling failures) is left out.
class BareTwoThreads {
 public:
  BareTwoThreads() : threads_{std::thread([this] { worker(0); }), std::thread([this] { worker(1); })} {}
  ~BareTwoThreads() {
    stop_.store(true, std::memory_order_relaxed);
    start_.fetch_add(1, std::memory_order_release);
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  BareTwoThreads(const BareTwoThreads&) = delete;
  BareTwoThreads& operator=(const BareTwoThreads&) = delete;

  // Per-operation time of an all_reduce of `leaves` tensors of `elements` float32 each; `wrong`
  // gets the wrong elements of the last results of both threads.
  Timing time(int leaves, std::int64_t elements, const Options& options, std::int64_t& wrong) {
    on_both([&](int t) {
      Side& me = sides_[t];
      me.inputs.clear();
      for (int k = 0; k < leaves; ++k) me.inputs.push_back(make_tensor(elements, k * elements, t, Device::cpu(t)));
      me.data.assign(static_cast<std::size_t>(leaves), nullptr);
      me.offsets.assign(static_cast<std::size_t>(leaves), 0);
      me.result.clear();
    });
    const int ops = ops_per_unit(static_cast<std::size_t>(leaves * elements) * sizeof(float), options);
    const Timing timing = time_unit(
        [&] {
          on_both([&](int t) {
            detail::ReleaseBatch batch;
            for (int k = 0; k < ops; ++k) all_reduce(t);
          });
        },
        ops, options);
    wrong = 0;
    for (const Side& side : sides_) {
      for (int k = 0; k < leaves; ++k) wrong += count_wrong(side.result[static_cast<std::size_t>(k)], k * elements, 2);
    }
    return timing;
  }

 private:
  struct alignas(64) Side {
    std::vector<Tensor> inputs;
    std::vector<const void*> data;  // the inputs' data, read by the other thread
    std::vector<std::size_t> offsets;
    std::byte* block = nullptr;  // this operation's outputs, written by the other thread too
    std::vector<Tensor> result;
    // On a line of its own: the other thread polls it while this one writes the fields above.
    alignas(64) std::atomic<std::uint64_t> meetings{0};
  };

  void all_reduce(int t) {
    Side& me = sides_[t];
    Side& other = sides_[1 - t];
    const std::size_t leaves = me.inputs.size();
    std::size_t bytes = 0;
    for (std::size_t k = 0; k < leaves; ++k) {
      me.data[k] = me.inputs[k].raw_data();
      me.offsets[k] = bytes = collective::align_leaf(bytes);
      bytes += me.inputs[k].nbytes();
    }
    const detail::StorageRef block = detail::allocate_storage(Device::cpu(t), bytes);
    me.block = static_cast<std::byte*>(block->data());
    meet(t);
    std::size_t begin = 0;
    std::size_t end = 0;
    const auto reduce = [&](std::size_t leaf, std::size_t from, std::size_t count) {
      const void* inputs[2] = {static_cast<const float*>(sides_[0].data[leaf]) + from,
                               static_cast<const float*>(sides_[1].data[leaf]) + from};
      detail::reduce_buffers(DType::kFloat32, ReduceOp::kSum, inputs,
                                 me.block + me.offsets[leaf] + from * sizeof(float), static_cast<std::int64_t>(count), 2);
    };
    if (leaves == 1) {
      const auto count = static_cast<std::size_t>(me.inputs[0].num_elements());
      const std::size_t half = count / 2 / 16 * 16;  // at a cache line
      const std::size_t first = t == 0 ? 0 : half;
      const std::size_t last = t == 0 ? half : count;
      reduce(0, first, last - first);
      begin = first * sizeof(float);
      end = last * sizeof(float);
    } else {
      const std::size_t lo = leaves * static_cast<std::size_t>(t) / 2;
      const std::size_t hi = leaves * static_cast<std::size_t>(t + 1) / 2;
      for (std::size_t k = lo; k < hi; ++k) reduce(k, 0, static_cast<std::size_t>(me.inputs[k].num_elements()));
      begin = me.offsets[lo];
      end = me.offsets[hi - 1] + me.inputs[hi - 1].nbytes();
    }
    std::memcpy(other.block + begin, me.block + begin, end - begin);
    meet(t);
    std::vector<Tensor> result;
    result.reserve(leaves);
    detail::TensorViews views(block, leaves);
    for (std::size_t k = 0; k < leaves; ++k) result.push_back(views.make(me.offsets[k], DType::kFloat32, me.inputs[k].shape()));
    me.result = std::move(result);
  }

  // Returns once the other thread has met this one as often.
  void meet(int t) {
    const std::uint64_t count = sides_[t].meetings.fetch_add(1, std::memory_order_release) + 1;
    wait_for(sides_[1 - t].meetings, count);
  }

  // Runs job(t) on thread t of the two and returns when both are done. The caller sleeps meanwhile
  // (as it does in strategy.run), so the two threads have the cores to themselves.
  void on_both(const std::function<void(int)>& job) {
    job_ = &job;
    const std::uint64_t target = finished_.load(std::memory_order_relaxed) + 2;
    start_.fetch_add(1, std::memory_order_release);
    start_.notify_all();
    for (std::uint64_t seen = finished_.load(std::memory_order_acquire); seen < target;
         seen = finished_.load(std::memory_order_acquire)) {
      finished_.wait(seen, std::memory_order_acquire);
    }
  }

  // Thread t: its own memory (a replica thread's, not the main thread's heap), one job per start.
  void worker(int t) {
    for (std::uint32_t seen = 0;;) {
      start_.wait(seen, std::memory_order_acquire);
      seen = start_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      (*job_)(t);
      finished_.fetch_add(1, std::memory_order_release);
      finished_.notify_one();
    }
  }

  Side sides_[2];
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<std::uint32_t> start_{0};
  alignas(64) std::atomic<std::uint64_t> finished_{0};
  std::thread threads_[2];  // last: they start once the members they use exist
};

void bench_replicas(int n, const Timing& handles, const Options& options) {
  MirroredStrategy strategy(cpu_devices(n));
  const std::size_t bytes = kTensors * kElementsPerTensor * sizeof(float);
  const int ops = ops_per_unit(bytes, options);

  PerReplica<std::vector<Tensor>> lists = strategy.run([] {
    std::vector<Tensor> list;
    for (int t = 0; t < kTensors; ++t) {
      list.push_back(make_tensor(kElementsPerTensor, t * kElementsPerTensor, *get_replica_context()));
    }
    return list;
  });
  PerReplica<Tensor> singles =
      strategy.run([] { return make_tensor(kTensors * kElementsPerTensor, 0, *get_replica_context()); });

  std::vector<std::vector<Tensor>> list_results(static_cast<std::size_t>(n));
  std::vector<Tensor> single_results(static_cast<std::size_t>(n));
  const Timing list_time = time_all_reduce(strategy, lists, list_results, ops, options);
  const Timing single_time = time_all_reduce(strategy, singles, single_results, ops, options);

  std::string wrong = "N/A";
  if (options.check) {
    PerReplica<std::int64_t> bad = strategy.run([&] {
      const auto id = static_cast<std::size_t>(get_replica_context()->replica_id_in_sync_group());
      std::int64_t b = count_wrong(single_results[id], 0, n);
      const std::vector<Tensor>& list = list_results[id];
      if (list.size() != kTensors) return std::int64_t{-1};
      for (int t = 0; t < kTensors; ++t) b += count_wrong(list[static_cast<std::size_t>(t)], t * kElementsPerTensor, n);
      return b;
    });
    std::int64_t total = 0;
    for (std::int64_t b : bad.values()) total += b < 0 ? kTensors * kElementsPerTensor : b;
    wrong = std::to_string(total);
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const double floor = (single_time.median_s + (n + cores - 1) / cores * handles.median_s) / single_time.median_s;
  std::printf("  %8d %16.2f %18.2f %8.2f %7s %6d %11.2f %6.2f\n", n, list_time.median_s * 1e6,
              single_time.median_s * 1e6, list_time.median_s / single_time.median_s, wrong.c_str(), ops,
              handles.median_s * 1e6, floor);
  std::fflush(stdout);
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  using namespace distribute::bench;
  const Options options = parse_options(
      argc, argv, "all_reduce of 100 float32 tensors of 1 KiB vs one 100 KiB tensor (sizes are ignored)", {2, 4, 8});
  std::printf("# fused_bench: %s\n", distribute::build_info().c_str());
  std::printf("# hardware threads: %u; time per all_reduce = median over repeats of (run time / K)\n",
              std::thread::hardware_concurrency());
  // First, before the library's runs have filled the pools: the bare program's lowest cost.
  {
    BareTwoThreads bare;
    std::int64_t list_wrong = 0;
    std::int64_t single_wrong = 0;
    const Timing list = bare.time(kTensors, kElementsPerTensor, options, list_wrong);
    const Timing single = bare.time(1, kTensors * kElementsPerTensor, options, single_wrong);
    std::printf("# bare 2 threads: 100x1KiB %.2f us, 1x100KiB %.2f us, ratio %.2f, #wrong %lld\n", list.median_s * 1e6,
                single.median_s * 1e6, list.median_s / single.median_s, static_cast<long long>(list_wrong + single_wrong));
  }
  std::printf("# %8s %16s %18s %8s %7s %6s %11s %6s\n", "replicas", "100x1KiB(us)", "1x100KiB(us)", "ratio", "#wrong",
              "K", "handles(us)", "floor");
  const Timing handles = time_handles(options);
  for (int n : options.replicas) bench_replicas(n, handles, options);
  return 0;
}
