// The per-step cost of the distributed input's agreement across workers (each get_next of a
// multi-worker strategy's distributed dataset agrees on the step with the other workers'):
//   mpirun -np 2 --oversubscribe --bind-to none ./build/default/bench/multiworker_input_bench
// Alternately, in one launch, epochs of tiny per-replica batches (data::range(steps * L).batch(1))
// read four ways: through the strategy's distribute_datasets_from_function, whose iterators
// agree, and through DistributedDataset::from_function on the same devices and InputContext
// without the agreement (each worker on its own, as before it); each with an empty loop body and
// with a step that runs an all_reduce of a float (the least a training step adds). Prints worker
// 0's median time per step over the repeats of each, and the agreement's share. Flags: --help.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "distribute/distribute.h"

ABSL_FLAG(int64_t, steps, 20000, "steps per epoch, >= 1");
ABSL_FLAG(int, repeats, 7, "timed epochs of each kind, >= 1; the table shows the medians");
ABSL_FLAG(int, replicas, 1, "replicas per worker (CPU:0..L-1), >= 1");

namespace {

using namespace distribute;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The per-step cost of the multi-worker input's agreement; run under mpirun with 2 or more processes.");
  const std::vector<char*> extra = absl::ParseCommandLine(argc, argv);
  const std::int64_t steps = absl::GetFlag(FLAGS_steps);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const int replicas = absl::GetFlag(FLAGS_replicas);
  if (extra.size() > 1 || steps < 1 || repeats < 1 || replicas < 1) {
    std::fprintf(stderr, "%s: %s; see --help\n", argv[0],
                 extra.size() > 1 ? ("unexpected argument '" + std::string(extra[1]) + "'").c_str()
                                  : "--steps, --repeats and --replicas must be >= 1");
    return 2;
  }
  MultiWorkerMirroredStrategyOptions options;
  for (int l = 0; l < replicas; ++l) options.local_devices.push_back("CPU:" + std::to_string(l));
  options.communication.timeout = std::chrono::seconds(60);
  MultiWorkerMirroredStrategy strategy(options);
  const auto dataset_fn = [&](const InputContext&) { return data::range(steps * replicas).batch(1); };
  const DistributedDataset<Tensor> agreed = strategy.distribute_datasets_from_function(dataset_fn);
  const DistributedDataset<Tensor> alone = DistributedDataset<Tensor>::from_function(
      strategy.extended().worker_devices(), dataset_fn, {}, strategy.extended().input_context());
  const auto all_reduce = [] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); };
  const auto step = [&](const Tensor&) { return all_reduce(); };
  // Seconds per step of one epoch, started together on every worker.
  const auto epoch = [&](const DistributedDataset<Tensor>& dataset, bool run) {
    strategy.run(all_reduce);
    const auto start = Clock::now();
    std::int64_t k = 0;
    for (const PerReplica<Tensor>& batch : dataset) {
      if (run) strategy.run(step, batch);
      ++k;
    }
    return std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(k);
  };
  std::vector<double> times[4];
  for (int r = 0; r <= repeats; ++r) {
    const double t[4] = {epoch(alone, false), epoch(agreed, false), epoch(alone, true), epoch(agreed, true)};
    if (r == 0) continue;  // warm-up
    for (int v = 0; v < 4; ++v) times[v].push_back(t[v]);
  }
  if (strategy.extended().worker_id() == 0) {
    const double m[4] = {median(times[0]), median(times[1]), median(times[2]), median(times[3])};
    std::printf("%d workers x %d replicas, %lld steps per epoch, median of %d epochs (worker 0), us per step:\n",
                strategy.extended().num_workers(), replicas, static_cast<long long>(steps), repeats);
    std::printf("  get_next only:            %7.2f without agreement, %7.2f with: +%.2f\n", m[0] * 1e6, m[1] * 1e6,
                (m[1] - m[0]) * 1e6);
    std::printf("  get_next + run(all_reduce): %7.2f without agreement, %7.2f with: +%.2f (%.0f%%)\n", m[2] * 1e6,
                m[3] * 1e6, (m[3] - m[2]) * 1e6, 100 * (m[3] - m[2]) / m[2]);
  }
  return 0;
}
