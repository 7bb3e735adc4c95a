// The loops around a model that the Fashion-MNIST examples share, whatever computes the replicas'
// passes (the MLP of model.h, or a LibTorch module in ../torch_fashion_mnist): an epoch of
// training, the training split shuffled, batched and handed to the replicas by
// experimental_distribute_dataset, each step through strategy.run (or a preemption handler), and
// the test accuracy counted by every replica into a sync-on-read variable. On one process and
// across the workers of a MultiWorkerMirroredStrategy alike.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>

#include "distribute/distribute.h"
#include "idx.h"

namespace fashion_mnist {

// The seconds from `start` until now, on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A replica's part of a batch: images float32 [n, 784], labels int32 [n]; n may be 0.
using Batch = std::pair<distribute::Tensor, distribute::Tensor>;

// How far an epoch is, after each step: for a progress bar.
struct StepProgress {
  int epoch = 0;  // counted from 1
  std::int64_t step = 0;
  std::int64_t steps = 0;  // in the epoch
  std::int64_t samples = 0;
  double seconds = 0;
  double mean_loss = 0;  // over the epoch's samples so far
};

struct EpochStats {
  int epoch = 0;  // counted from 1
  std::int64_t samples = 0;
  double seconds = 0;  // training only, without the evaluation
  double train_loss = 0;
  double test_accuracy = 0;
  // Shares of the training time: the gradients' collectives (as the caller times them: the mean
  // over replicas of the time each spent in them, waiting for the others included), and the loop
  // waiting for its next batch.
  double collective_share = 0;
  double input_share = 0;
  double samples_per_second() const { return seconds > 0 ? static_cast<double>(samples) / seconds : 0; }
};

struct EpochPlan {
  int epoch = 1;  // counted from 1; the order of the examples depends on seed + epoch alone
  std::uint64_t seed = 1;
  std::int64_t global_batch_size = 128;  // split across every replica of every worker
  std::int64_t steps = 0;                // the epoch's steps (fewer when the data ends first)
  std::int64_t first_step = 0;           // the steps a checkpoint holds already: skipped, not trained
};

// The global batches of an epoch of `examples` in batches of `global_batch_size`: the last may be
// smaller.
std::int64_t steps_per_epoch(std::int64_t examples, std::int64_t global_batch_size);

// One replica's training step on its part of a global batch of `global_rows` examples (the last
// batch of an epoch is smaller, and some replicas may get no rows of it). Returns the replica's
// share of the global batch's mean loss, a float32 scalar: its examples' summed loss divided by
// global_rows, as nn::compute_average_loss makes it.
using ReplicaStep = std::function<distribute::Tensor(const Batch& batch, std::int64_t global_rows)>;

// Trains plan.steps - plan.first_step steps of `train` shuffled by the plan, each through
// handler->run when there is a handler (strategy.run otherwise), calling on_step after each. Fills
// every field of the result but test_accuracy and collective_share. Call it under the strategy's
// scope.
EpochStats run_epoch(distribute::Strategy& strategy, const Split& train, const EpochPlan& plan, const ReplicaStep& step,
                     distribute::PreemptionCheckpointHandler* handler,
                     const std::function<void(const StepProgress&)>& on_step);

// The share of `test` whose label each replica's count_correct finds (the number of examples of
// its part of the batch predicted right), in batches of `batch_size` split across the replicas.
// Call it under the strategy's scope.
double accuracy(distribute::Strategy& strategy, const Split& test, std::int64_t batch_size,
                const std::function<std::int64_t(const Batch& batch)>& count_correct);

}  // namespace fashion_mnist
