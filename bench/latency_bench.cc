// Fixed costs through the public API, for each replica count N (MirroredStrategy over
// CPU:0..N-1): an empty strategy.run (dispatch to the replica threads + join), a merge_call round
// trip with a trivial merge_fn (K merge_calls inside one run, time per merge_call) and, for
// reference, a 4-byte all_reduce measured the same way. Median and p90 in microseconds.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "replica_bench.h"
#include "distribute/distribute.h"

namespace distribute::bench {
namespace {

constexpr int kOpsPerRun = 100;
constexpr int kRunSamples = 2000;
constexpr int kUnitSamples = 200;
constexpr int kWarmupPerOption = 100;

struct Result {
  std::vector<double> per_op_s;
  int ops = 1;
};

// Times `samples` calls of unit() after `warmup` untimed ones; each sample is divided by ops.
template <class Unit>
Result sample(Unit&& unit, int ops, int samples, int warmup) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) unit();
  Result result;
  result.ops = ops;
  result.per_op_s.reserve(static_cast<std::size_t>(samples));
  for (int i = 0; i < samples; ++i) {
    const Clock::time_point start = Clock::now();
    unit();
    result.per_op_s.push_back(std::chrono::duration<double>(Clock::now() - start).count() / ops);
  }
  return result;
}

void print_result(int n, const char* what, const Result& r) {
  std::printf("  %8d  %-34s %10.2f %10.2f %8zu %8d\n", n, what, median(r.per_op_s) * 1e6,
              percentile(r.per_op_s, 90) * 1e6, r.per_op_s.size(), r.ops);
  std::fflush(stdout);
}

void bench_replicas(int n, const Options& options) {
  MirroredStrategy strategy(cpu_devices(n));
  const int warmup = kWarmupPerOption * options.warmup;
  const int run_samples = options.iters > 0 ? options.iters : kRunSamples;
  const int unit_samples = options.iters > 0 ? options.iters : kUnitSamples;
  const int ops = options.ops > 0 ? options.ops : kOpsPerRun;

  print_result(n, "run (empty fn: dispatch + join)", sample([&] { strategy.run([] {}); }, 1, run_samples, warmup));

  const Result merge = sample(
      [&] {
        strategy.run([ops] {
          ReplicaContext& ctx = *get_replica_context();
          for (int k = 0; k < ops; ++k) ctx.merge_call([](Strategy&) {});
        });
      },
      ops, unit_samples, warmup / ops + 1);
  print_result(n, "merge_call (trivial merge_fn)", merge);

  PerReplica<Tensor> inputs = strategy.run([] { return Tensor::scalar(1.0f, get_replica_context()->device()); });
  const Result reduce = sample(
      [&] {
        strategy.run(
            [ops](const Tensor& in) {
              ReplicaContext& ctx = *get_replica_context();
              for (int k = 0; k < ops; ++k) ctx.all_reduce(ReduceOp::kSum, in);
            },
            inputs);
      },
      ops, unit_samples, warmup / ops + 1);
  print_result(n, "all_reduce float32, 4 bytes", reduce);
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  using namespace distribute::bench;
  const Options options = parse_options(
      argc, argv,
      "Latency of run, merge_call and a 4-byte all_reduce through MirroredStrategy.\n"
      "--iters: samples per line (default 2000 runs, 200 runs of K ops); --warmup W: 100*W untimed runs;\n"
      "--ops K: merge_calls / all_reduces per run (default 100); sizes are ignored.",
      {1, 2, 4, 8});
  std::printf("# latency_bench: %s\n", distribute::build_info().c_str());
  std::printf("# hardware threads: %u; times per operation in microseconds; K = operations per run\n",
              std::thread::hardware_concurrency());
  std::printf("# %8s  %-34s %10s %10s %8s %8s\n", "replicas", "operation", "median(us)", "p90(us)", "samples",
              "K");
  for (int n : options.replicas) bench_replicas(n, options);
  return 0;
}
