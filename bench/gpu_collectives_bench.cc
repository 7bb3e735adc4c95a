// GPU all_reduce (float32, sum), all_gather (float32, axis 0) and reduce_scatter (float32, sum)
// through the public API, beside raw NCCL on the same buffers in the same run, so that the
// library's overhead reads as a ratio.
//
// For each replica count N (default: every physical GPU, one logical GPU each) a MirroredStrategy
// over GPU:0..N-1, and N NCCL communicators of our own from ncclCommInitAll over the same
// physical GPUs, each with its own non-blocking stream. For each size S (default 8 B .. 1 GiB,
// factor 2) every GPU gets a cudaMalloc'd send and receive buffer, once per size:
//   library: one strategy.run in which every replica calls all_reduce(kSum, x) (all_gather(x, 0),
//            reduce_scatter(kSum, x)) K times on x = Tensor::from_blob(its send buffer), dropping
//            each result before the next call, as a raw NCCL loop keeps one receive buffer; run
//            returns once every replica's stream has drained.
//   NCCL:    K times {ncclGroupStart; ncclAllReduce (ncclAllGather, ncclReduceScatter) on every
//            GPU; ncclGroupEnd}, then cudaStreamSynchronize on every stream: the single-thread
//            multi-GPU pattern.
// time = median over repeats of (unit time / K), as in the CPU benchmarks (bench/common.h), with
// K at least 20 (nccl-tests' default iterations between synchronisations), so that one run's
// start and end do not count as a large collective's cost.
// Columns follow nccl-tests: algbw = S / time, busbw = algbw * 2(n-1)/n (all_reduce) or
// algbw * (n-1)/n (all_gather, where S is the gathered size, and reduce_scatter, where S is the
// input size); #wrong counts result elements that differ from the exact expected value after
// timing; lib/nccl = library time / NCCL time (1.00 = no overhead).
//
// --logical N splits physical GPU 0 into N logical GPUs and measures the library alone (it then
// reduces through one device; NCCL takes one rank per physical GPU, so its columns read n/a).
//
// --profile takes one replica on GPU 0 apart, per size, to show where the library's time beside
// raw NCCL goes (µs per collective, each the median over repeats of K collectives):
//   nccl   raw ncclAllReduce / ncclAllGather in a group, one receive buffer (the table's baseline)
//   lone   the same without a group (how the library issues a lone call)
//   nb     lone on a non-blocking communicator, polling ncclCommGetAsyncError after each call
//          (the library's communicators are non-blocking so that a stalled call can be aborted)
//   synced nb on a stream ordered against the legacy default stream, as a replica's stream is (the
//          library's configuration of NCCL exactly)
//   fresh  nccl with each receive buffer a new cudaMallocAsync block, freed after the call
//   lib    the library (as in the table)
//   run    one strategy.run with no collective, divided by K (the library's share of dispatch)
//   alloc  Tensor::empty of the output on the replica's GPU and its release, inside a run
//   gpu    device time per collective from CUDA events around the K calls, library / nccl: a
//          row where gpu is close to the wall time is bound by the GPU, not by the host
//   addrs  distinct output addresses over the library's K calls (1: the output block is reused)
//
//   ./build/default/bench/gpu_collectives_bench --max-bytes 1G
//   ./build/default/bench/gpu_collectives_bench --replicas 2,8 --min-bytes 1M --factor 4
//   ./build/default/bench/gpu_collectives_bench --logical 4 --max-bytes 256M
//   ./build/default/bench/gpu_collectives_bench --profile --min-bytes 1M --max-bytes 64M
//
// Without a visible GPU it says so and exits 0; it exits 1 on a CUDA or NCCL failure or when a
// result is wrong.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "distribute/device/gpu.h"
#include "replica_bench.h"

namespace distribute::bench {
namespace {

constexpr const char* kProgram = "gpu_collectives_bench";

void check_cuda(cudaError_t result, const char* call) {
  if (result == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s failed: %s (%s)\n", kProgram, call, cudaGetErrorName(result),
               cudaGetErrorString(result));
  std::exit(1);
}

void check_nccl(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return;
  std::fprintf(stderr, "%s: %s failed: %s (%s)\n", kProgram, call, ncclGetErrorString(result),
               ncclGetLastError(nullptr));
  std::exit(1);
}

// The call's text goes into the message, so a failure names the exact call.
#define BENCH_CUDA_CHECK(call) check_cuda((call), #call)
#define BENCH_NCCL_CHECK(call) check_nccl((call), #call)

// One cudaMalloc'd block per replica on the replica's physical GPU: memory the library does not
// own, so the library and raw NCCL read the very same bytes.
class DeviceBuffers {
 public:
  DeviceBuffers(const std::vector<int>& physical, std::size_t bytes) : physical_(physical), data_(physical.size()) {
    for (std::size_t r = 0; r < physical_.size(); ++r) {
      BENCH_CUDA_CHECK(cudaSetDevice(physical_[r]));
      BENCH_CUDA_CHECK(cudaMalloc(&data_[r], bytes));
    }
  }
  ~DeviceBuffers() {
    for (std::size_t r = 0; r < physical_.size(); ++r) {
      BENCH_CUDA_CHECK(cudaSetDevice(physical_[r]));
      BENCH_CUDA_CHECK(cudaFree(data_[r]));
    }
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  void* operator[](int replica) const { return data_[static_cast<std::size_t>(replica)]; }

  // Copies value(i), i < count, into the replica's buffer.
  template <class ValueFn>
  void fill(int replica, std::size_t count, ValueFn value) const {
    std::vector<float> host(count);
    for (std::size_t i = 0; i < count; ++i) host[i] = value(i);
    BENCH_CUDA_CHECK(cudaSetDevice(physical_[static_cast<std::size_t>(replica)]));
    BENCH_CUDA_CHECK(cudaMemcpy((*this)[replica], host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  }

  std::vector<float> read(int replica, std::size_t count) const {
    std::vector<float> host(count);
    BENCH_CUDA_CHECK(cudaSetDevice(physical_[static_cast<std::size_t>(replica)]));
    BENCH_CUDA_CHECK(cudaMemcpy(host.data(), (*this)[replica], count * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  std::vector<int> physical_;
  std::vector<void*> data_;
};

// The baseline: our own communicators over the same GPUs, driven from this one thread.
class RawNccl {
 public:
  explicit RawNccl(const std::vector<int>& physical) : comms_(physical.size()), streams_(physical.size()) {
    BENCH_NCCL_CHECK(ncclCommInitAll(comms_.data(), static_cast<int>(physical.size()), physical.data()));
    for (std::size_t g = 0; g < physical.size(); ++g) {
      BENCH_CUDA_CHECK(cudaSetDevice(physical[g]));
      // Non-blocking, as in nccl-tests: the legacy default stream (used by the checks' copies)
      // must not serialise with the timed work.
      BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[g], cudaStreamNonBlocking));
    }
  }
  ~RawNccl() {
    for (std::size_t g = 0; g < comms_.size(); ++g) {
      BENCH_NCCL_CHECK(ncclCommDestroy(comms_[g]));
      BENCH_CUDA_CHECK(cudaStreamDestroy(streams_[g]));
    }
  }
  RawNccl(const RawNccl&) = delete;
  RawNccl& operator=(const RawNccl&) = delete;

  void all_reduce(const DeviceBuffers& send, const DeviceBuffers& recv, std::size_t count, int ops) {
    for (int k = 0; k < ops; ++k) {
      BENCH_NCCL_CHECK(ncclGroupStart());
      for (int g = 0; g < size(); ++g) {
        BENCH_NCCL_CHECK(ncclAllReduce(send[g], recv[g], count, ncclFloat, ncclSum, comm(g), stream(g)));
      }
      BENCH_NCCL_CHECK(ncclGroupEnd());
    }
    synchronize();
  }

  // count_per_rank elements from every rank; recv holds size() * count_per_rank.
  void all_gather(const DeviceBuffers& send, const DeviceBuffers& recv, std::size_t count_per_rank, int ops) {
    for (int k = 0; k < ops; ++k) {
      BENCH_NCCL_CHECK(ncclGroupStart());
      for (int g = 0; g < size(); ++g) {
        BENCH_NCCL_CHECK(ncclAllGather(send[g], recv[g], count_per_rank, ncclFloat, comm(g), stream(g)));
      }
      BENCH_NCCL_CHECK(ncclGroupEnd());
    }
    synchronize();
  }

  // send holds size() * count_per_rank elements on every rank; rank g's recv gets the g-th
  // count_per_rank of their sum.
  void reduce_scatter(const DeviceBuffers& send, const DeviceBuffers& recv, std::size_t count_per_rank, int ops) {
    for (int k = 0; k < ops; ++k) {
      BENCH_NCCL_CHECK(ncclGroupStart());
      for (int g = 0; g < size(); ++g) {
        BENCH_NCCL_CHECK(
            ncclReduceScatter(send[g], recv[g], count_per_rank, ncclFloat, ncclSum, comm(g), stream(g)));
      }
      BENCH_NCCL_CHECK(ncclGroupEnd());
    }
    synchronize();
  }

 private:
  int size() const { return static_cast<int>(comms_.size()); }
  ncclComm_t comm(int g) const { return comms_[static_cast<std::size_t>(g)]; }
  cudaStream_t stream(int g) const { return streams_[static_cast<std::size_t>(g)]; }
  void synchronize() {
    for (cudaStream_t s : streams_) BENCH_CUDA_CHECK(cudaStreamSynchronize(s));
  }

  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
};

// Small integers, so every sum is exact in float32 and the checks compare exactly.
float reduce_input(int replica, std::size_t i) { return static_cast<float>(replica + 1 + static_cast<int>(i % 7)); }
float reduce_expected(int n, std::size_t i) {
  return static_cast<float>(n * static_cast<int>(i % 7) + n * (n + 1) / 2);
}
// Distinct per replica and position (a misplaced block shows), exact in float32.
float gather_input(int replica, std::size_t i) {
  return static_cast<float>(replica * 1000 + static_cast<int>(i % 997));
}

template <class ExpectedFn>
std::int64_t count_wrong(const std::vector<float>& got, std::size_t expected_count, ExpectedFn expected) {
  if (got.size() != expected_count) return static_cast<std::int64_t>(expected_count);
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != expected(i) ? 1 : 0;
  return wrong;
}

struct Measurement {
  double seconds = 0;  // per operation
  std::optional<std::int64_t> wrong;  // nullopt: not checked
};

struct GpuRow {
  std::size_t bytes = 0;
  std::size_t count = 0;
  const char* redop = "sum";
  double bus_factor = 1;
  Measurement library;
  std::optional<Measurement> nccl;  // nullopt: no NCCL baseline (logical GPUs)
};

// What one replica count measures with.
struct Setup {
  int n = 0;
  std::vector<int> physical;  // of GPU:0..n-1
  MirroredStrategy* strategy = nullptr;
  RawNccl* nccl = nullptr;  // null with logical GPUs
  const Options* options = nullptr;
};

// Collectives per timed unit: the CPU benchmarks' rule, but never fewer than nccl-tests' 20.
int gpu_ops_per_unit(std::size_t bytes, const Options& options) {
  constexpr int kMinOps = 20;
  return options.ops > 0 ? options.ops : std::max(kMinOps, ops_per_unit(bytes, options));
}

PerReplica<Tensor> wrap(const DeviceBuffers& buffers, int n, std::size_t count) {
  std::vector<Tensor> tensors;
  for (int r = 0; r < n; ++r) {
    tensors.push_back(
        Tensor::from_blob(buffers[r], DType::kFloat32, Shape{static_cast<std::int64_t>(count)}, Device::gpu(r)));
  }
  return PerReplica<Tensor>(std::move(tensors));
}

GpuRow bench_all_reduce(const Setup& setup, std::size_t count) {
  const Options& options = *setup.options;
  const int n = setup.n;
  const std::size_t bytes = count * sizeof(float);
  const int ops = gpu_ops_per_unit(bytes, options);
  const auto expected = [n](std::size_t i) { return reduce_expected(n, i); };
  GpuRow row{.bytes = bytes, .count = count, .bus_factor = bus_factor(Collective::kAllReduce, n)};

  const DeviceBuffers send(setup.physical, bytes);
  for (int r = 0; r < n; ++r) send.fill(r, count, [r](std::size_t i) { return reduce_input(r, i); });

  std::vector<Tensor> results(static_cast<std::size_t>(n));
  row.library.seconds =
      time_all_reduce(*setup.strategy, wrap(send, n, count), results, ops, options, PreviousResult::kDropped).median_s;
  if (options.check) {
    row.library.wrong = 0;
    for (const Tensor& result : results) *row.library.wrong += count_wrong(result.to_vector<float>(), count, expected);
  }
  results.clear();  // back to the library's pool before NCCL runs

  if (setup.nccl != nullptr) {
    const DeviceBuffers recv(setup.physical, bytes);
    Measurement& m = row.nccl.emplace();
    m.seconds = time_unit([&] { setup.nccl->all_reduce(send, recv, count, ops); }, ops, options).median_s;
    if (options.check) {
      m.wrong = 0;
      for (int r = 0; r < n; ++r) *m.wrong += count_wrong(recv.read(r, count), count, expected);
    }
  }
  return row;
}

// `per_rank` elements from every replica; the row's size is the gathered size.
GpuRow bench_all_gather(const Setup& setup, std::size_t per_rank) {
  const Options& options = *setup.options;
  const int n = setup.n;
  const std::size_t count = per_rank * static_cast<std::size_t>(n);
  const std::size_t bytes = count * sizeof(float);
  const int ops = gpu_ops_per_unit(bytes, options);
  const auto expected = [per_rank](std::size_t i) {
    return gather_input(static_cast<int>(i / per_rank), i % per_rank);
  };
  GpuRow row{.bytes = bytes, .count = count, .redop = "none", .bus_factor = bus_factor(Collective::kAllGather, n)};

  const DeviceBuffers send(setup.physical, per_rank * sizeof(float));
  for (int r = 0; r < n; ++r) send.fill(r, per_rank, [r](std::size_t i) { return gather_input(r, i); });

  std::vector<Tensor> results(static_cast<std::size_t>(n));
  row.library.seconds =
      time_all_gather(*setup.strategy, wrap(send, n, per_rank), results, 0, ops, options, PreviousResult::kDropped)
          .median_s;
  if (options.check) {
    row.library.wrong = 0;
    for (const Tensor& result : results) *row.library.wrong += count_wrong(result.to_vector<float>(), count, expected);
  }
  results.clear();

  if (setup.nccl != nullptr) {
    const DeviceBuffers recv(setup.physical, bytes);
    Measurement& m = row.nccl.emplace();
    m.seconds = time_unit([&] { setup.nccl->all_gather(send, recv, per_rank, ops); }, ops, options).median_s;
    if (options.check) {
      m.wrong = 0;
      for (int r = 0; r < n; ++r) *m.wrong += count_wrong(recv.read(r, count), count, expected);
    }
  }
  return row;
}

// `per_rank` elements of the sum for every replica: the row's size is the input's bytes, every
// replica's shard is equal (ncclReduceScatter takes one count for every rank).
GpuRow bench_reduce_scatter(const Setup& setup, std::size_t per_rank) {
  const Options& options = *setup.options;
  const int n = setup.n;
  const std::size_t count = per_rank * static_cast<std::size_t>(n);
  const std::size_t bytes = count * sizeof(float);
  const int ops = gpu_ops_per_unit(bytes, options);
  GpuRow row{.bytes = bytes, .count = count, .bus_factor = bus_factor(Collective::kReduceScatter, n)};
  // Replica r's shard is elements [r * per_rank, (r + 1) * per_rank) of the sum.
  const auto wrong_in = [n, per_rank](int r, const std::vector<float>& got) {
    return count_wrong(got, per_rank, [n, per_rank, r](std::size_t i) {
      return reduce_expected(n, static_cast<std::size_t>(r) * per_rank + i);
    });
  };

  const DeviceBuffers send(setup.physical, bytes);
  for (int r = 0; r < n; ++r) send.fill(r, count, [r](std::size_t i) { return reduce_input(r, i); });

  std::vector<Tensor> results(static_cast<std::size_t>(n));
  row.library.seconds = time_collective(*setup.strategy, wrap(send, n, count), results, ops, options,
                                        PreviousResult::kDropped, [](ReplicaContext& ctx, const Tensor& in) {
                                          return ctx.reduce_scatter(ReduceOp::kSum, in);
                                        })
                            .median_s;
  if (options.check) {
    row.library.wrong = 0;
    for (int r = 0; r < n; ++r) {
      *row.library.wrong += wrong_in(r, results[static_cast<std::size_t>(r)].to_vector<float>());
    }
  }
  results.clear();

  if (setup.nccl != nullptr) {
    const DeviceBuffers recv(setup.physical, per_rank * sizeof(float));
    Measurement& m = row.nccl.emplace();
    m.seconds = time_unit([&] { setup.nccl->reduce_scatter(send, recv, per_rank, ops); }, ops, options).median_s;
    if (options.check) {
      m.wrong = 0;
      for (int r = 0; r < n; ++r) *m.wrong += wrong_in(r, recv.read(r, per_rank));
    }
  }
  return row;
}

// The per-replica element counts of `sizes` (bytes in all) split over n replicas, at least one
// each; small sizes that round to the same count appear once.
std::vector<std::size_t> per_rank_counts(const std::vector<std::size_t>& sizes, int n) {
  std::vector<std::size_t> counts;
  for (const std::size_t size : sizes) {
    const std::size_t per_rank = std::max<std::size_t>(size / (sizeof(float) * static_cast<std::size_t>(n)), 1);
    if (counts.empty() || counts.back() != per_rank) counts.push_back(per_rank);
  }
  return counts;
}

void print_gpu_table_header(const std::string& title, const std::string& library, const std::string& nccl) {
  std::printf("#\n# %s\n", title.c_str());
  std::printf("# %10s %12s %6s %6s  %-36s  %-36s\n", "", "", "", "", library.c_str(), nccl.c_str());
  std::printf("# %10s %12s %6s %6s  %10s %8s %8s %7s  %10s %8s %8s %7s %8s\n", "size", "count", "type", "redop",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "lib/nccl");
  std::printf("# %10s %12s %6s %6s  %10s %8s %8s %7s  %10s %8s %8s %7s %8s\n", "(B)", "(elements)", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "");
  std::fflush(stdout);
}

std::string format_wrong(const std::optional<std::int64_t>& wrong) {
  return wrong ? std::to_string(*wrong) : "N/A";
}

void print_gpu_row(const GpuRow& row) {
  const double lib_algbw = static_cast<double>(row.bytes) / row.library.seconds / 1e9;
  std::printf("  %10zu %12zu %6s %6s  %10.2f %8.2f %8.2f %7s", row.bytes, row.count, "float", row.redop,
              row.library.seconds * 1e6, lib_algbw, lib_algbw * row.bus_factor,
              format_wrong(row.library.wrong).c_str());
  if (row.nccl) {
    const double algbw = static_cast<double>(row.bytes) / row.nccl->seconds / 1e9;
    std::printf("  %10.2f %8.2f %8.2f %7s %8.2f\n", row.nccl->seconds * 1e6, algbw, algbw * row.bus_factor,
                format_wrong(row.nccl->wrong).c_str(), row.library.seconds / row.nccl->seconds);
  } else {
    std::printf("  %10s %8s %8s %7s %8s\n", "n/a", "n/a", "n/a", "n/a", "n/a");
  }
  std::fflush(stdout);
}

// nccl-tests' closing lines for one table, for both paths, and the overhead at a few sizes.
// Returns the wrong elements of both paths together.
std::int64_t print_gpu_summary(const std::string& what, const std::vector<GpuRow>& rows) {
  if (rows.empty()) return 0;
  std::int64_t lib_wrong = 0;
  std::int64_t nccl_wrong = 0;
  double lib_busbw = 0;
  double nccl_busbw = 0;
  for (const GpuRow& row : rows) {
    lib_wrong += row.library.wrong.value_or(0);
    lib_busbw += static_cast<double>(row.bytes) / row.library.seconds / 1e9 * row.bus_factor;
    if (row.nccl) {
      nccl_wrong += row.nccl->wrong.value_or(0);
      nccl_busbw += static_cast<double>(row.bytes) / row.nccl->seconds / 1e9 * row.bus_factor;
    }
  }
  const bool checked = rows.front().library.wrong.has_value();
  const bool has_nccl = rows.front().nccl.has_value();
  const double size = static_cast<double>(rows.size());
  const char* verdict = !checked ? "(not checked)" : lib_wrong + nccl_wrong == 0 ? "OK" : "WRONG";
  if (has_nccl) {
    std::printf("# %s: out of bounds values: library %lld, NCCL %lld %s\n", what.c_str(),
                static_cast<long long>(lib_wrong), static_cast<long long>(nccl_wrong), verdict);
    std::printf("# %s: avg bus bandwidth: library %.3f GB/s, NCCL %.3f GB/s\n", what.c_str(), lib_busbw / size,
                nccl_busbw / size);
    std::string ratios;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const GpuRow& row = rows[i];
      const bool landmark = i == 0 || i + 1 == rows.size() || row.bytes == kMiB || row.bytes == 64 * kMiB;
      if (!landmark) continue;
      char text[64];
      std::snprintf(text, sizeof(text), "%s%s %.2f", ratios.empty() ? "" : ", ", format_bytes(row.bytes).c_str(),
                    row.library.seconds / row.nccl->seconds);
      ratios += text;
    }
    std::printf("# %s: lib/nccl: %s\n", what.c_str(), ratios.c_str());
  } else {
    std::printf("# %s: out of bounds values: library %lld %s\n", what.c_str(), static_cast<long long>(lib_wrong),
                verdict);
    std::printf("# %s: avg bus bandwidth: library %.3f GB/s\n", what.c_str(), lib_busbw / size);
  }
  std::printf("# %s: %s latency: %.2f us (library)\n", what.c_str(), format_bytes(rows.front().bytes).c_str(),
              rows.front().library.seconds * 1e6);
  std::fflush(stdout);
  return lib_wrong + nccl_wrong;
}

// The three collectives for one replica count; returns the wrong elements.
std::int64_t bench_replicas(int n, bool logical, const Options& options) {
  std::vector<std::string> devices;
  std::vector<int> physical;
  for (int r = 0; r < n; ++r) {
    devices.push_back("GPU:" + std::to_string(r));
    physical.push_back(physical_gpu_of(Device::gpu(r)));
  }
  MirroredStrategy strategy(devices, MirroredStrategyOptions{});
  std::optional<RawNccl> nccl;
  if (!logical) nccl.emplace(physical);
  const Setup setup{.n = n, .physical = physical, .strategy = &strategy, .nccl = nccl ? &*nccl : nullptr,
                    .options = &options};
  const std::string library = "library (" + std::string(strategy.cross_device_ops()) + ")";
  const std::vector<std::size_t> sizes = sweep_sizes(options);
  std::vector<std::size_t> whole_counts;
  for (const std::size_t size : sizes) whole_counts.push_back(std::max<std::size_t>(size / sizeof(float), 1));
  const std::vector<std::size_t> shard_counts = per_rank_counts(sizes, n);

  // One table: its title (what, and what its size means), raw NCCL's call, the element counts it
  // sweeps and how one row is measured.
  std::int64_t wrong = 0;
  const auto table = [&](const std::string& what, const std::string& size_note, const char* nccl_call,
                         const std::vector<std::size_t>& counts, GpuRow (*measure)(const Setup&, std::size_t)) {
    print_gpu_table_header(what + ", " + std::to_string(n) + " replicas (" + strategy.name() + ")" + size_note,
                           library,
                           logical ? "raw NCCL: n/a (one physical GPU)" : "raw NCCL (" + std::string(nccl_call) + ")");
    std::vector<GpuRow> rows;
    for (const std::size_t count : counts) {
      rows.push_back(measure(setup, count));
      print_gpu_row(rows.back());
    }
    wrong += print_gpu_summary(what.substr(0, what.find(' ')) + " N=" + std::to_string(n), rows);
  };
  table("all_reduce", "", "ncclAllReduce", whole_counts, bench_all_reduce);
  table("all_gather (axis 0)", "; size = gathered bytes", "ncclAllGather", shard_counts, bench_all_gather);
  table("reduce_scatter (sum)", "; size = input bytes, equal shards", "ncclReduceScatter", shard_counts,
        bench_reduce_scatter);
  return wrong;
}

// ---- --profile: one replica on GPU 0, the library's time taken apart beside raw NCCL variants.

enum class Kind { kAllReduce, kAllGather };

// One rank of our own on physical GPU 0, blocking or not, with its own stream: non-blocking, or
// like a replica's, ordered against the legacy default stream (`synced`).
class RawRank {
 public:
  explicit RawRank(bool blocking, bool synced = false) {
    BENCH_CUDA_CHECK(cudaSetDevice(0));
    ncclUniqueId id;
    BENCH_NCCL_CHECK(ncclGetUniqueId(&id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking ? 1 : 0;
    ncclResult_t started = ncclCommInitRankConfig(&comm_, 1, id, 0, &config);
    if (started != ncclInProgress) BENCH_NCCL_CHECK(started);
    settle();
    BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, synced ? cudaStreamDefault : cudaStreamNonBlocking));
  }
  ~RawRank() {
    BENCH_NCCL_CHECK(ncclCommDestroy(comm_));
    BENCH_CUDA_CHECK(cudaStreamDestroy(stream_));
  }
  RawRank(const RawRank&) = delete;
  RawRank& operator=(const RawRank&) = delete;

  // One collective; grouped or not; on a non-blocking communicator, polled until enqueued.
  void call(Kind kind, const void* send, void* recv, std::size_t count, bool grouped) {
    if (grouped) BENCH_NCCL_CHECK(ncclGroupStart());
    const ncclResult_t started = kind == Kind::kAllReduce
                                     ? ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm_, stream_)
                                     : ncclAllGather(send, recv, count, ncclFloat, comm_, stream_);
    if (started != ncclInProgress) BENCH_NCCL_CHECK(started);
    if (grouped) {
      const ncclResult_t ended = ncclGroupEnd();
      if (ended != ncclInProgress) BENCH_NCCL_CHECK(ended);
    }
    settle();
  }
  cudaStream_t stream() const { return stream_; }

 private:
  void settle() {
    for (;;) {
      ncclResult_t state = ncclInProgress;
      BENCH_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) BENCH_NCCL_CHECK(state);
    }
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// Device time per call of `ops` calls enqueued on `stream` by enqueue(), from two events.
template <class Enqueue>
double device_seconds_per_op(cudaStream_t stream, int ops, Enqueue&& enqueue) {
  cudaEvent_t start;
  cudaEvent_t stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  BENCH_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int k = 0; k < ops; ++k) enqueue();
  BENCH_CUDA_CHECK(cudaEventRecord(stop, stream));
  BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  BENCH_CUDA_CHECK(cudaEventDestroy(start));
  BENCH_CUDA_CHECK(cudaEventDestroy(stop));
  return static_cast<double>(ms) * 1e-3 / ops;
}

void profile_size(Kind kind, std::size_t bytes, MirroredStrategy& strategy, RawRank& blocking, RawRank& nonblocking,
                  RawRank& like_a_replica, const Options& options) {
  const std::size_t count = std::max<std::size_t>(bytes / sizeof(float), 1);
  const int ops = gpu_ops_per_unit(bytes, options);
  const std::vector<int> gpu0 = {0};
  const DeviceBuffers send(gpu0, count * sizeof(float));
  const DeviceBuffers recv(gpu0, count * sizeof(float));
  send.fill(0, count, [](std::size_t i) { return reduce_input(0, i); });
  const auto raw = [&](RawRank& rank, bool grouped) {
    return time_unit(
               [&] {
                 for (int k = 0; k < ops; ++k) rank.call(kind, send[0], recv[0], count, grouped);
                 BENCH_CUDA_CHECK(cudaStreamSynchronize(rank.stream()));
               },
               ops, options)
        .median_s;
  };
  const double nccl = raw(blocking, true);
  const double lone = raw(blocking, false);
  const double nb = raw(nonblocking, false);
  const double synced = raw(like_a_replica, false);
  const double fresh = time_unit(
                           [&] {
                             for (int k = 0; k < ops; ++k) {
                               void* out = nullptr;
                               BENCH_CUDA_CHECK(cudaMallocAsync(&out, count * sizeof(float), blocking.stream()));
                               blocking.call(kind, send[0], out, count, true);
                               BENCH_CUDA_CHECK(cudaFreeAsync(out, blocking.stream()));
                             }
                             BENCH_CUDA_CHECK(cudaStreamSynchronize(blocking.stream()));
                           },
                           ops, options)
                           .median_s;

  const Tensor input = Tensor::from_blob(send[0], DType::kFloat32, Shape{static_cast<std::int64_t>(count)},
                                         Device::gpu(0));
  const auto collective = [kind](ReplicaContext& ctx, const Tensor& x) {
    return kind == Kind::kAllReduce ? ctx.all_reduce(ReduceOp::kSum, x) : ctx.all_gather(x, 0);
  };
  std::vector<Tensor> results(1);
  const double lib = time_collective(strategy, PerReplica<Tensor>({input}), results, ops, options,
                                     PreviousResult::kDropped, collective)
                         .median_s;
  results.clear();
  const double run = time_unit([&] { strategy.run([] {}); }, ops, options).median_s;
  const double alloc =
      time_unit(
          [&] {
            strategy.run([&] {
              for (int k = 0; k < ops; ++k) Tensor::empty(DType::kFloat32, Shape{static_cast<std::int64_t>(count)});
            });
          },
          ops, options)
          .median_s -
      run;

  double gpu_lib = 0;
  absl::flat_hash_set<const void*> addresses;
  strategy.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    Tensor out;
    gpu_lib = device_seconds_per_op(cuda::current_stream(), ops, [&] {
      out = Tensor();
      out = collective(ctx, input);
      addresses.insert(out.raw_data());
    });
  });
  const double gpu_nccl = device_seconds_per_op(blocking.stream(), ops, [&] {
    blocking.call(kind, send[0], recv[0], count, true);
  });
  std::printf("  %10zu %5d %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %6zu %8.2f\n", bytes, ops,
              nccl * 1e6, lone * 1e6, nb * 1e6, synced * 1e6, fresh * 1e6, lib * 1e6, run * 1e6, alloc * 1e6,
              gpu_lib * 1e6, gpu_nccl * 1e6, addresses.size(), lib / nccl);
  std::fflush(stdout);
}

int run_profile(const Options& options) {
  MirroredStrategy strategy({"GPU:0"}, MirroredStrategyOptions{});
  RawRank blocking(true);
  RawRank nonblocking(false);
  RawRank like_a_replica(false, true);
  for (const Kind kind : {Kind::kAllReduce, Kind::kAllGather}) {
    std::printf("#\n# --profile: %s, 1 replica (%s, %s); us per collective\n",
                kind == Kind::kAllReduce ? "all_reduce" : "all_gather", strategy.name().c_str(),
                std::string(strategy.cross_device_ops()).c_str());
    std::printf("# %10s %5s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %6s %8s\n", "size (B)", "K", "nccl", "lone", "nb",
                "synced", "fresh", "lib", "run/K", "alloc", "gpu lib", "gpu nccl", "addrs", "lib/nccl");
    for (const std::size_t size : sweep_sizes(options)) {
      profile_size(kind, size, strategy, blocking, nonblocking, like_a_replica, options);
    }
  }
  return 0;
}

void print_gpu_preamble(const Options& options, std::optional<int> logical) {
  std::printf("# %s: %s\n", kProgram, build_info().c_str());
  int runtime = 0;
  int driver = 0;
  int nccl = 0;
  BENCH_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  BENCH_CUDA_CHECK(cudaDriverGetVersion(&driver));
  BENCH_NCCL_CHECK(ncclGetVersion(&nccl));
  std::printf("# CUDA runtime %d.%d, driver %d.%d; NCCL %d.%d.%d (built with %d.%d.%d)\n", runtime / 1000,
              runtime % 1000 / 10, driver / 1000, driver % 1000 / 10, nccl / 10000, nccl % 10000 / 100, nccl % 100,
              NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  const int gpus = num_physical_gpus();
  std::printf("# %d physical GPU%s\n", gpus, gpus == 1 ? "" : "s");
  for (int g = 0; g < gpus; ++g) {
    cudaDeviceProp prop{};
    BENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, g));
    std::printf("#   GPU %d: %s, %.1f GiB, PCI %04x:%02x:%02x\n", g, prop.name,
                static_cast<double>(prop.totalGlobalMem) / static_cast<double>(1024 * kMiB), prop.pciDomainID,
                prop.pciBusID, prop.pciDeviceID);
  }
  if (logical) {
    std::printf("# --logical %d: physical GPU 0 split into %d logical GPUs; library only\n", *logical, *logical);
  }
  std::printf("# sizes %s .. %s, factor %zu; warmup %d; repeats %s; check %d\n",
              format_bytes(options.min_bytes).c_str(), format_bytes(options.max_bytes).c_str(), options.factor,
              options.warmup,
              options.iters > 0 ? std::to_string(options.iters).c_str() : "auto (3..20, ~0.3 s per size)",
              options.check ? 1 : 0);
  std::printf("# library: one strategy.run, every replica calling the collective K times on Tensor::from_blob of its "
              "send buffer, dropping each result before the next call\n");
  std::printf("# NCCL: K x {ncclGroupStart; the collective on every GPU; ncclGroupEnd} on the same send buffers, then "
              "cudaStreamSynchronize of every stream\n");
  std::printf("# time: median over repeats of (time of one repeat / K); K = 16 MiB / size, 20..1000 (--ops K)\n");
  std::printf("# GB/s = 1e9 bytes/s; algbw = size / time; busbw = algbw * 2(n-1)/n (all_reduce), algbw * (n-1)/n "
              "(all_gather, reduce_scatter); lib/nccl = library time / NCCL time (1.00 = no overhead)\n");
  std::fflush(stdout);
}

// Takes "--logical N" / "--logical=N" out of args: common.cc's parser knows only the shared options.
std::optional<int> take_logical(std::vector<std::string>& args) {
  std::optional<int> logical;
  for (std::size_t i = 1; i < args.size();) {
    std::string value;
    std::size_t taken = 1;
    if (args[i] == "--logical") {
      if (i + 1 < args.size()) value = args[i + 1];
      taken = 2;
    } else if (args[i].starts_with("--logical=")) {
      value = args[i].substr(std::string("--logical=").size());
    } else {
      ++i;
      continue;
    }
    std::size_t used = 0;
    int parsed = 0;
    try {
      parsed = std::stoi(value, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (value.empty() || used != value.size() || parsed < 1) {
      std::fprintf(stderr, "%s: bad value '%s' for --logical (a number of logical GPUs, >= 1)\n", kProgram,
                   value.c_str());
      std::exit(2);
    }
    logical = parsed;
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
               args.begin() + static_cast<std::ptrdiff_t>(std::min(i + taken, args.size())));
  }
  return logical;
}

// Takes "--profile" out of args.
bool take_profile(std::vector<std::string>& args) {
  const auto it = std::find(args.begin() + 1, args.end(), std::string("--profile"));
  if (it == args.end()) return false;
  args.erase(it);
  return true;
}

constexpr const char* kDescription =
    "GPU all_reduce (float32, sum), all_gather (float32, axis 0) and reduce_scatter (float32, sum) through\n"
    "MirroredStrategy::run, beside raw NCCL (ncclAllReduce / ncclAllGather / ncclReduceScatter) on the same\n"
    "cudaMalloc'd buffers in the same run.\n"
    "Defaults here: --min-bytes 8 --max-bytes 1G; --replicas = every physical GPU (one replica each).\n"
    "  --logical N       split physical GPU 0 into N logical GPUs and measure the library only\n"
    "                    (--replicas defaults to N; NCCL takes one rank per physical GPU, so no baseline)\n"
    "  --profile         one replica on GPU 0: the library's time per collective taken apart beside raw\n"
    "                    NCCL variants (columns explained at the top of gpu_collectives_bench.cc)";

int run_main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  if (args.empty()) args.emplace_back(kProgram);
  const std::optional<int> logical = take_logical(args);
  const bool profile = take_profile(args);
  // This benchmark's own size defaults go first, so that the user's options override them.
  args.insert(args.begin() + 1, {"--min-bytes", "8", "--max-bytes", "1G"});
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());

  const int gpus = num_physical_gpus();
  const int available = logical ? *logical : gpus;
  const Options options = parse_options(static_cast<int>(pointers.size()), pointers.data(), kDescription,
                                        {std::max(available, 1)});
  if (gpus == 0) {
    std::printf("%s: no GPU visible (%s); nothing to measure\n", kProgram, gpu_unavailable_reason().c_str());
    return 0;
  }
  for (int n : options.replicas) {
    if (n > available) {
      std::fprintf(stderr, "%s: --replicas %d, but only %d %s GPU%s\n", kProgram, n, available,
                   logical ? "logical" : "physical", available == 1 ? "" : "s");
      return 2;
    }
  }
  if (logical) set_logical_device_configuration(0, std::vector<LogicalDeviceConfiguration>(*logical));

  print_gpu_preamble(options, logical);
  if (profile) return run_profile(options);
  std::int64_t wrong = 0;
  for (int n : options.replicas) wrong += bench_replicas(n, logical.has_value(), options);
  if (wrong != 0) {
    std::fprintf(stderr, "%s: %lld wrong result elements\n", kProgram, static_cast<long long>(wrong));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  return distribute::bench::main_reporting_errors(distribute::bench::kProgram, distribute::bench::run_main, argc, argv);
}
