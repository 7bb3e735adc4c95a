// MultiWorkerMirroredStrategy's all_reduce across the workers of one job, over the backend its
// launch chooses: under mpirun over MPI, as plain processes (RANK, WORLD_SIZE and
// DISTRIBUTE_RENDEZVOUS set) over Gloo. Run it both ways on the same hosts to compare the backends,
// e.g. on two hosts of the multi-host harness whose links run at 10 Gbit/s:
//   tests/multihost/hosts.sh --hosts 2 --rate 10 -- build/default/bench/backend_all_reduce_bench
//   tests/multihost/hosts.sh --hosts 2 --rate 10 --gloo -- build/default/bench/backend_all_reduce_bench
// float32 sum over --replicas local replicas per worker; each repeat's time is the slowest
// worker's. nccl-tests columns beside worker 0's same-run 2-thread memcpy bandwidth; busbw counts
// every replica of every worker; a last line gives each size's cross-worker votes per all_reduce.
// --async issues each repeat's all_reduces without waiting and waits for them at its end. Flags: --help.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common.h"
#include "distribute/distribute.h"

ABSL_FLAG(int, replicas, 1, "local replicas of each worker (CPU:0..L-1), >= 1");
ABSL_FLAG(std::string, min_bytes, "4", "smallest size (suffixes K, M, G: powers of 1024)");
ABSL_FLAG(std::string, max_bytes, "64M", "largest size, >= --min_bytes");
ABSL_FLAG(int, factor, 4, "size multiplier between rows, >= 2");
ABSL_FLAG(int, iters, 5, "timed repeats per size, >= 1");
ABSL_FLAG(int, warmup, 2, "untimed repeats before the timed ones, >= 0");
ABSL_FLAG(int, ops, 0, "operations per timed repeat; 0: 16 MiB / size, 1..1000");
ABSL_FLAG(bool, async, false,
          "issue each repeat's operations with all_reduce_async and wait for them at the end: the calls queued "
          "behind a voted one are agreed on in its vote");

namespace distribute::bench {
namespace {

// The slowest worker's seconds for `unit`, which every worker runs after a small all_reduce that
// lines them up.
double slowest(MultiWorkerMirroredStrategy& strategy, const std::function<void()>& unit) {
  strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  const auto start = std::chrono::steady_clock::now();
  unit();
  const float seconds = std::chrono::duration<float>(std::chrono::steady_clock::now() - start).count();
  const PerReplica<Tensor> all = strategy.run(
      [seconds] { return get_replica_context()->all_gather(Tensor::from_vector<float>({seconds}, Shape{1}), 0); });
  const std::vector<float> times = all[0].to_vector<float>();
  return *std::max_element(times.begin(), times.end());
}

int run(const Options& options) {
  MultiWorkerMirroredStrategyOptions strategy_options;
  for (int l = 0; l < options.replicas[0]; ++l) strategy_options.local_devices.push_back("CPU:" + std::to_string(l));
  strategy_options.communication.timeout = std::chrono::seconds(120);
  MultiWorkerMirroredStrategy strategy(strategy_options);
  const bool chief = strategy.extended().worker_id() == 0;
  const int n = strategy.num_replicas_in_sync();
  const std::vector<std::size_t> sizes = sweep_sizes(options);
  std::vector<double> memcpy_bw(sizes.size());
  if (chief) {
    print_preamble("backend_all_reduce_bench", options);
    MemcpyBaseline baseline(sizes.back());
    for (std::size_t s = 0; s < sizes.size(); ++s) memcpy_bw[s] = baseline.bandwidth(sizes[s], options);
  }
  std::vector<Row> rows;
  std::vector<double> votes_per_op;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const auto count = static_cast<std::int64_t>(std::max<std::size_t>(sizes[s] / sizeof(float), 1));
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
    const int ops = ops_per_unit(bytes, options);
    const PerReplica<Tensor> inputs = strategy.experimental_distribute_values_from_function([&](const ValueContext& ctx) {
      return Tensor::from_vector<float>(
          std::vector<float>(static_cast<std::size_t>(count), static_cast<float>(ctx.replica_id_in_sync_group())),
          Shape{count});
    });
    const bool async = absl::GetFlag(FLAGS_async);
    const auto unit = [&] {
      strategy.run(
          [&](const Tensor& in) {
            ReplicaContext& ctx = *get_replica_context();
            if (!async) {
              for (int k = 0; k < ops; ++k) ctx.all_reduce(ReduceOp::kSum, in);
              return;
            }
            std::vector<CollectiveHandle<Tensor>> handles;
            for (int k = 0; k < ops; ++k) handles.push_back(ctx.all_reduce_async(ReduceOp::kSum, in));
            for (CollectiveHandle<Tensor>& h : handles) h.wait();
          },
          inputs);
    };
    std::vector<double> times;
    std::int64_t votes = 0;
    for (int i = 0; i < options.warmup + options.iters; ++i) {
      const std::int64_t votes_before = strategy.extended().collective_stats().cross_worker_votes;
      const double seconds = slowest(strategy, unit) / ops;
      if (i >= options.warmup) times.push_back(seconds);
      // The timed unit's votes: the line-up's all_reduce and the all_gather after it take 2, their
      // runs' ends 2 more.
      votes += strategy.extended().collective_stats().cross_worker_votes - votes_before - 4;
    }
    votes_per_op.push_back(static_cast<double>(votes) / (options.warmup + options.iters) / ops);
    // Every replica's sum of the ids 0..n-1, counted across the workers.
    const PerReplica<Tensor> sums =
        strategy.run([](const Tensor& in) { return get_replica_context()->all_reduce(ReduceOp::kSum, in); }, inputs);
    std::int64_t wrong = 0;
    for (const Tensor& t : sums.values()) {
      for (float v : t.to_vector<float>()) wrong += v != static_cast<float>(n * (n - 1) / 2) ? 1 : 0;
    }
    const PerReplica<std::int64_t> all_wrong =
        strategy.run([wrong] { return get_replica_context()->all_reduce(ReduceOp::kSum, wrong); });
    rows.push_back(Row{.bytes = bytes, .count = static_cast<std::size_t>(count), .seconds = median(times),
                       .bus_factor = bus_factor(Collective::kAllReduce, n), .wrong = all_wrong[0],
                       .memcpy_bytes_per_s = memcpy_bw[s]});
  }
  if (chief) {
    print_table_header(strategy.name() + " all_reduce, " + std::to_string(strategy.extended().num_workers()) +
                       " workers x " + std::to_string(options.replicas[0]) + " replicas");
    for (const Row& row : rows) print_row(row);
    std::printf("# the workers' votes per all_reduce (a run's end counted):");
    for (double v : votes_per_op) std::printf(" %.2f", v);
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "MultiWorkerMirroredStrategy all_reduce (float32, sum) across the workers of one job, over MPI under mpirun "
      "and over Gloo as plain processes");
  const std::vector<char*> extra = absl::ParseCommandLine(argc, argv);
  distribute::bench::Options options;
  options.replicas = {absl::GetFlag(FLAGS_replicas)};
  options.factor = static_cast<std::size_t>(std::max(absl::GetFlag(FLAGS_factor), 0));
  options.iters = absl::GetFlag(FLAGS_iters);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.ops = absl::GetFlag(FLAGS_ops);
  try {
    options.min_bytes = distribute::bench::parse_size(absl::GetFlag(FLAGS_min_bytes));
    options.max_bytes = distribute::bench::parse_size(absl::GetFlag(FLAGS_max_bytes));
  } catch (const std::logic_error&) {
    std::fprintf(stderr, "backend_all_reduce_bench: a size is digits with an optional K, M or G\n");
    return 2;
  }
  if (extra.size() > 1 || options.min_bytes == 0 || options.min_bytes > options.max_bytes ||
      options.replicas[0] < 1 || options.factor < 2 || options.iters < 1 || options.warmup < 0 || options.ops < 0) {
    std::fprintf(stderr, "backend_all_reduce_bench: need 0 < --min_bytes <= --max_bytes, --replicas >= 1, "
                         "--factor >= 2, --iters >= 1, --warmup >= 0, --ops >= 0 and no other arguments\n");
    return 2;
  }
  return distribute::bench::run(options);
}
