// Async collectives on GPUs: the step time of a replica that sums a gradient and computes, with
// the sum blocking and with it issued without waiting (all_reduce_async, on the replica's
// communication stream), beside the compute alone and the sum alone; and where two or more NCCL
// ranks take part, the 16-bit compressed sums beside float32.
//
// Each step: a compute kernel (multiply-adds over a 64 MiB buffer, --compute_iters per element)
// and the all_reduce of a float32 gradient of --mib MiB. Blocking: all_reduce, then the compute.
// Async: all_reduce_async, the compute, then wait(). overlap = (blocking - async) / min(compute,
// all_reduce): 100 % when the shorter one hides entirely behind the longer. Times are the median of
// --repeats runs of --steps steps each, per step, from the host (run returns once the streams
// have drained). One step of each is also shown on the GPU's clock: CUDA events on the replica's
// stream at its start, after its first part and after its second.
//
//   ./build/default/bench/gpu_overlap_bench                       # one process, GPU:0 (1 NCCL rank)
//   mpirun -np 2 ./build/default/bench/gpu_overlap_bench --multi_worker   # a NCCL rank per worker
//
// Under --multi_worker each worker takes GPU:<local rank modulo the GPUs>; workers sharing a GPU
// present themselves to NCCL as hosts of their own (bench/gpu_run.sh sets NCCL_HOSTID), so NCCL
// joins them through its socket transport. Without a visible GPU it says so and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common.h"
#include "distribute/distribute.h"
#include "distribute/mpi/multi_worker_mirrored_strategy.h"
#include "testing/gpu_work.h"

ABSL_FLAG(bool, multi_worker, false, "one NCCL rank per worker, under mpirun (MultiWorkerMirroredStrategy)");
ABSL_FLAG(int, mib, 64, "the gradient's size in MiB (float32)");
ABSL_FLAG(int, compute_iters, 4000, "multiply-adds per element of the compute kernel's 64 MiB buffer");
ABSL_FLAG(int, steps, 20, "steps per timed run");
ABSL_FLAG(int, repeats, 5, "timed runs (the median is reported)");

namespace distribute::bench {
namespace {

constexpr std::int64_t kComputeCount = std::int64_t{16} << 20;  // 64 MiB of float32

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
}

enum class Mode { kCompute, kAllReduce, kBlocking, kAsync };

// What one replica holds across steps.
struct Buffers {
  Tensor gradient;
  Tensor work;
};

// One step of `mode` on the calling replica; records events (when given) on the replica's stream
// at its start, between its parts and at its end.
void step(Mode mode, Buffers& b, int compute_iters, Compression compression, cudaEvent_t* events) {
  ReplicaContext& ctx = *get_replica_context();
  const auto stream = static_cast<cudaStream_t>(cuda::current_stream());
  const CommunicationOptions options{.compression = compression};
  const auto compute = [&] { check(testing::gpu::compute(static_cast<float*>(b.work.raw_data()), kComputeCount, compute_iters, stream), "compute"); };
  if (events != nullptr) check(cudaEventRecord(events[0], stream), "event");
  switch (mode) {
    case Mode::kCompute:
      compute();
      if (events != nullptr) check(cudaEventRecord(events[1], stream), "event");
      break;
    case Mode::kAllReduce:
      b.gradient = ctx.all_reduce(ReduceOp::kSum, b.gradient, options);
      if (events != nullptr) check(cudaEventRecord(events[1], stream), "event");
      break;
    case Mode::kBlocking:
      b.gradient = ctx.all_reduce(ReduceOp::kSum, b.gradient, options);
      if (events != nullptr) check(cudaEventRecord(events[1], stream), "event");
      compute();
      break;
    case Mode::kAsync: {
      CollectiveHandle<Tensor> sum = ctx.all_reduce_async(ReduceOp::kSum, b.gradient, options);
      compute();
      if (events != nullptr) check(cudaEventRecord(events[1], stream), "event");
      b.gradient = sum.wait();
      break;
    }
  }
  if (events != nullptr) check(cudaEventRecord(events[2], stream), "event");
}

struct Result {
  double step_ms = 0;
  float first_part_ms = 0;  // events[1] - events[0] on replica 0's stream
  float whole_ms = 0;       // events[2] - events[0]
};

Result measure(Strategy& strategy, std::vector<Buffers>& buffers, Mode mode, Compression compression) {
  const int steps = absl::GetFlag(FLAGS_steps);
  const int iters = absl::GetFlag(FLAGS_compute_iters);
  std::vector<double> times;
  Result result;
  cudaEvent_t events[3];
  for (cudaEvent_t& e : events) check(cudaEventCreate(&e), "event");
  for (int repeat = -1; repeat < absl::GetFlag(FLAGS_repeats); ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    strategy.run([&] {
      const int local = get_replica_context()->replica_id_in_sync_group() % static_cast<int>(buffers.size());
      for (int s = 0; s < steps; ++s) {
        const bool traced = local == 0 && s == steps - 1 && repeat == 0;
        step(mode, buffers[static_cast<std::size_t>(local)], iters, compression, traced ? events : nullptr);
      }
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (repeat >= 0) times.push_back(seconds / steps);
  }
  check(cudaEventElapsedTime(&result.first_part_ms, events[0], events[1]), "elapsed");
  check(cudaEventElapsedTime(&result.whole_ms, events[0], events[2]), "elapsed");
  for (cudaEvent_t& e : events) cudaEventDestroy(e);
  result.step_ms = median(times) * 1e3;
  return result;
}

int run_main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Async collectives on GPUs: step time with and without overlap (docs/gpus.md)");
  absl::ParseCommandLine(argc, argv);
  if (num_physical_gpus() == 0) {
    std::printf("gpu_overlap_bench: no GPU visible (%s); nothing to measure\n", gpu_unavailable_reason().c_str());
    return 0;
  }
  std::unique_ptr<Strategy> strategy;
  if (absl::GetFlag(FLAGS_multi_worker)) {
    const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const int gpu = (local_rank != nullptr ? std::atoi(local_rank) : 0) % num_physical_gpus();
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = {"GPU:" + std::to_string(gpu)};
    strategy = std::make_unique<MultiWorkerMirroredStrategy>(options);
  } else {
    MirroredStrategyOptions options;
    options.cross_device_ops = CrossDeviceOps::kNcclAllReduce;
    strategy = std::make_unique<MirroredStrategy>(std::vector<std::string>{"GPU:0"}, options);
  }
  const int ranks = strategy->num_replicas_in_sync();
  const bool print = strategy->extended().worker_id() == 0;
  const std::int64_t count = static_cast<std::int64_t>(absl::GetFlag(FLAGS_mib)) << 18;
  std::vector<Buffers> buffers(static_cast<std::size_t>(strategy->extended().num_local_replicas()));
  strategy->run([&] {
    ReplicaContext& ctx = *get_replica_context();
    Buffers& b = buffers[static_cast<std::size_t>(ctx.replica_id_in_sync_group() % static_cast<int>(buffers.size()))];
    b.gradient = Tensor::zeros(DType::kFloat32, Shape{count}, ctx.device());
    b.work = Tensor::zeros(DType::kFloat32, Shape{kComputeCount}, ctx.device());
  });
  if (print) {
    std::printf("# gpu_overlap_bench: %d NCCL rank%s (%s), gradient %d MiB float32, compute %d multiply-adds x 16M "
                "elements, %d steps per run, median of %d runs\n",
                ranks, ranks == 1 ? "" : "s", absl::GetFlag(FLAGS_multi_worker) ? "one per worker" : "one process",
                absl::GetFlag(FLAGS_mib), absl::GetFlag(FLAGS_compute_iters), absl::GetFlag(FLAGS_steps),
                absl::GetFlag(FLAGS_repeats));
  }
  const std::vector<Compression> compressions =
      ranks > 1 ? std::vector<Compression>{Compression::kNone, Compression::kBfloat16, Compression::kFloat16}
                : std::vector<Compression>{Compression::kNone};
  for (const Compression compression : compressions) {
    const Result compute = measure(*strategy, buffers, Mode::kCompute, compression);
    const Result sum = measure(*strategy, buffers, Mode::kAllReduce, compression);
    const Result blocking = measure(*strategy, buffers, Mode::kBlocking, compression);
    const Result async = measure(*strategy, buffers, Mode::kAsync, compression);
    if (!print) continue;
    const double overlap = (blocking.step_ms - async.step_ms) / std::min(compute.step_ms, sum.step_ms);
    std::printf("# compression %s\n", compression_name(compression));
    std::printf("%-44s %9.3f ms\n", "compute alone", compute.step_ms);
    std::printf("%-44s %9.3f ms   %7.2f GB/s algbw\n", "all_reduce alone", sum.step_ms,
                static_cast<double>(count) * 4 / (sum.step_ms * 1e-3) / 1e9);
    std::printf("%-44s %9.3f ms\n", "blocking: all_reduce, then compute", blocking.step_ms);
    std::printf("%-44s %9.3f ms   overlap %.0f %%\n", "async: all_reduce_async, compute, wait", async.step_ms,
                overlap * 100);
    std::printf("  one step on the replica's stream (GPU clock, ms from its start):\n");
    std::printf("    blocking: all_reduce 0.000-%.3f | compute %.3f-%.3f\n", blocking.first_part_ms,
                blocking.first_part_ms, blocking.whole_ms);
    std::printf("    async:    compute 0.000-%.3f (the all_reduce on the communication stream meanwhile) | "
                "result usable at %.3f\n",
                async.first_part_ms, async.whole_ms);
  }
  return 0;
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  return distribute::bench::main_reporting_errors("gpu_overlap_bench", distribute::bench::run_main, argc, argv);
}
