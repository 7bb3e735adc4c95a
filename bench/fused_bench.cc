// A gradient list through one collective: all_reduce of a std::vector of 100 float32 tensors of
// 1 KiB each against all_reduce of one 100 KiB tensor, for each replica count N (MirroredStrategy
// over CPU:0..N-1). Both are timed as K all_reduces inside one run; the ratio list / single shows
// what the per-tensor overhead costs. Beside them, the part of that overhead no engine can avoid:
// one thread making the list's 100 output Tensors (views of one block, their references taken
// with one atomic add, as all_reduce makes them) and dropping them, each on its own as a user
// drops them, inside a ReleaseBatch as a replica's step does. Each replica pays it, and the replicas sharing a core pay it one after the other,
// so "floor" = (single + ceil(N / cores) x handles) / single is the lowest ratio this machine
// allows.
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "replica_bench.h"

namespace distribute::bench {
namespace {

constexpr int kTensors = 100;
constexpr std::int64_t kElementsPerTensor = 256;  // 1 KiB of float32

float input_value(int replica, std::int64_t i) { return static_cast<float>(static_cast<int>(i % 5) + replica); }

float expected_sum(int n, std::int64_t i) { return static_cast<float>(n * static_cast<int>(i % 5) + n * (n - 1) / 2); }

Tensor make_tensor(std::int64_t count, std::int64_t first, const ReplicaContext& ctx) {
  Tensor t = Tensor::empty(DType::kFloat32, Shape{count}, ctx.device());
  float* data = t.data<float>();
  for (std::int64_t i = 0; i < count; ++i) data[i] = input_value(ctx.replica_id_in_sync_group(), first + i);
  return t;
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
  std::printf("# %8s %16s %18s %8s %7s %6s %11s %6s\n", "replicas", "100x1KiB(us)", "1x100KiB(us)", "ratio", "#wrong",
              "K", "handles(us)", "floor");
  const Timing handles = time_handles(options);
  for (int n : options.replicas) bench_replicas(n, handles, options);
  return 0;
}
