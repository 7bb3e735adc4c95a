// Fixed costs through the public API, for each replica count N (MirroredStrategy over
// CPU:0..N-1): an empty strategy.run (dispatch to the replica threads + join), a merge_call round
// trip with a trivial merge_fn (K merge_calls inside one run, time per merge_call) and a 4-byte
// all_reduce measured the same way. Median and p90 in microseconds, and the median as a multiple
// of the machine's floor measured in the same run: one round trip of a cache line between two
// spinning threads on two cores. Beside them, where Open MPI is installed, its 2-process
// MPI_Allreduce of 4 bytes (mpi_all_reduce_bench, next to this program, under mpirun).
//
//   ./build/default/bench/latency_bench --replicas 2,4
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "replica_bench.h"

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

double g_round_trip_s = 0;

void print_line(int n, const char* what, double median_s, double p90_s, std::size_t samples, int ops) {
  std::printf("  %8d  %-34s %10.2f %10.2f %8.2f %8zu %8d\n", n, what, median_s * 1e6, p90_s * 1e6,
              median_s / g_round_trip_s, samples, ops);
  std::fflush(stdout);
}

void print_result(int n, const char* what, const Result& r) {
  print_line(n, what, median(r.per_op_s), percentile(r.per_op_s, 90), r.per_op_s.size(), r.ops);
}

// Open MPI's 4-byte MPI_Allreduce between 2 processes, from mpi_all_reduce_bench run under mpirun;
// nullopt where either is missing or the run fails.
std::optional<double> mpi_all_reduce_4b_seconds() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::filesystem::path mpi_bench = self.parent_path() / "mpi_all_reduce_bench";
  if (error || !std::filesystem::exists(mpi_bench) || std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    return std::nullopt;
  }
  const std::string command = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe "
                              "--bind-to none " +
                              mpi_bench.string() + " --min-bytes 4 --max-bytes 4 --iters 20 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::optional<double> us;
  std::array<char, 512> line;
  while (std::fgets(line.data(), static_cast<int>(line.size()), pipe) != nullptr) {
    double value = 0;
    if (const char* at = std::strstr(line.data(), "4 B latency: "); at != nullptr &&
                                                                      std::sscanf(at, "4 B latency: %lf", &value) == 1) {
      us = value;
    }
  }
  if (pclose(pipe) != 0 || !us) return std::nullopt;
  return *us * 1e-6;
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
  g_round_trip_s = core_round_trip_seconds();
  std::printf("# hardware threads: %u; times per operation in microseconds; K = operations per run\n",
              std::thread::hardware_concurrency());
  std::printf("# RT = one core-to-core round trip of a cache line, measured now: %.3f us\n", g_round_trip_s * 1e6);
  std::printf("# %8s  %-34s %10s %10s %8s %8s %8s\n", "replicas", "operation", "median(us)", "p90(us)", "xRT",
              "samples", "K");
  for (int n : options.replicas) bench_replicas(n, options);
  if (const std::optional<double> mpi = mpi_all_reduce_4b_seconds()) {
    print_line(2, "MPI_Allreduce 4 bytes (2 processes)", *mpi, *mpi, 1, 1);
  } else {
    std::printf("# MPI_Allreduce: not measured (needs mpirun and mpi_all_reduce_bench next to this program)\n");
  }
  return 0;
}
