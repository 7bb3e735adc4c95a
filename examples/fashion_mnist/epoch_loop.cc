// An epoch's distributed input, its steps and their loss; the test accuracy.
#include "epoch_loop.h"

#include <algorithm>
#include <optional>

namespace fashion_mnist {
namespace {

using distribute::PerReplica;
using distribute::ReduceOp;
using distribute::Tensor;
using distribute::Variable;
using Clock = std::chrono::steady_clock;

}  // namespace

std::int64_t steps_per_epoch(std::int64_t examples, std::int64_t global_batch_size) {
  return (examples + global_batch_size - 1) / global_batch_size;
}

EpochStats run_epoch(distribute::Strategy& strategy, const Split& train, const EpochPlan& plan, const ReplicaStep& step,
                     distribute::PreemptionCheckpointHandler* handler,
                     const std::function<void(const StepProgress&)>& on_step) {
  EpochStats stats;
  stats.epoch = plan.epoch;
  StepProgress progress;
  progress.epoch = plan.epoch;
  progress.steps = plan.steps;
  progress.step = plan.first_step;
  // A new order each epoch, fixed by the seed and the epoch alone, so that a resumed run sees the
  // batches an uninterrupted one would.
  const auto dataset = distribute::data::Dataset<Batch>::from_tensor_slices(Batch{train.images, train.labels})
                           .shuffle(train.size(), plan.seed + static_cast<std::uint64_t>(plan.epoch),
                                    /*reshuffle_each_iteration=*/false)
                           .batch(plan.global_batch_size)
                           .skip(progress.step)
                           .prefetch(2);
  distribute::DistributedIterator<Batch> batches = strategy.experimental_distribute_dataset(dataset).make_iterator();

  double input_seconds = 0;
  double loss_sum = 0;
  const auto start = Clock::now();
  while (progress.step < progress.steps) {
    const auto wait = Clock::now();
    std::optional<PerReplica<Batch>> batch = batches.get_next_as_optional();
    input_seconds += seconds_since(wait);
    if (!batch) break;
    // Every worker reads the same split: the global batch's rows follow from the step alone.
    const std::int64_t rows = std::min(plan.global_batch_size, train.size() - progress.step * plan.global_batch_size);
    const auto replica_step = [&step, rows](const Batch& b) { return step(b, rows); };
    const PerReplica<Tensor> losses =
        handler != nullptr ? handler->run(replica_step, *batch) : strategy.run(replica_step, *batch);
    // Each replica's loss is its share of the global batch's mean loss: their sum is that mean.
    const double mean_loss = strategy.reduce(ReduceOp::kSum, losses, std::nullopt).item<float>();
    loss_sum += mean_loss * static_cast<double>(rows);
    stats.samples += rows;
    ++progress.step;
    progress.samples = stats.samples;
    progress.seconds = seconds_since(start);
    progress.mean_loss = loss_sum / static_cast<double>(stats.samples);
    if (on_step) on_step(progress);
  }
  stats.seconds = seconds_since(start);
  stats.train_loss = stats.samples > 0 ? loss_sum / static_cast<double>(stats.samples) : 0.0;
  stats.input_share = stats.seconds > 0 ? input_seconds / stats.seconds : 0.0;
  return stats;
}

double accuracy(distribute::Strategy& strategy, const Split& test, std::int64_t batch_size,
                const std::function<std::int64_t(const Batch& batch)>& count_correct) {
  // Sync-on-read SUM: each replica counts its own examples; read in cross-replica context, the
  // variable is the sum of the counts.
  Variable correct(0.0f, {.name = "test_correct",
                          .trainable = false,
                          .synchronization = distribute::VariableSynchronization::kOnRead,
                          .aggregation = distribute::VariableAggregation::kSum});
  const auto dataset =
      distribute::data::Dataset<Batch>::from_tensor_slices(Batch{test.images, test.labels}).batch(batch_size);
  for (const PerReplica<Batch>& batch : strategy.experimental_distribute_dataset(dataset)) {
    strategy.run([&](const Batch& b) { correct.assign_add(static_cast<float>(count_correct(b))); }, batch);
  }
  return correct.value().item<float>() / static_cast<double>(test.size());
}

}  // namespace fashion_mnist
