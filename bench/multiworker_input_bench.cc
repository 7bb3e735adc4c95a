// The per-step cost of the distributed input's agreement across workers (each get_next of a
// multi-worker strategy's distributed dataset agrees on the step with the other workers'):
//   mpirun -np 2 --oversubscribe --bind-to none ./build/default/bench/multiworker_input_bench
// Alternately, in one launch, epochs of tiny per-replica batches (data::range(steps * L).batch(1))
// read four ways: through the strategy's distribute_datasets_from_function, whose iterators
// agree, and through DistributedDataset::from_function on the same devices and InputContext
// without the agreement (each worker on its own, as before it); each with an empty loop body and
// with a step that runs an all_reduce of a float (the least a training step adds). Prints worker
// 0's median time per step over the repeats of each, and the agreement's share. Options: --steps
// N (per epoch, default 20000), --repeats R (default 7), --replicas L (local, default 1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "distribute/distribute.h"

namespace {

using namespace distribute;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t steps = 20000;
  int repeats = 7;
  int replicas = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long value = std::atol(argv[i + 1]);
    if (flag == "--steps") {
      steps = value;
    } else if (flag == "--repeats") {
      repeats = static_cast<int>(value);
    } else if (flag == "--replicas") {
      replicas = static_cast<int>(value);
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--repeats R] [--replicas L]\n", argv[0]);
      return 2;
    }
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
