// The MLP's step on every replica, and what a checkpoint holds; epoch_loop.cc runs the loops.
#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fashion_mnist {
namespace {

using distribute::ReduceOp;
using distribute::StrategyScope;
using distribute::Tensor;
using distribute::Variable;
using distribute::optimizers::GradientBuckets;
using Clock = std::chrono::steady_clock;

}  // namespace

std::unique_ptr<distribute::optimizers::Optimizer> make_optimizer(const TrainerOptions& options) {
  namespace optimizers = distribute::optimizers;
  const optimizers::OptimizerOptions state{.shard_state = options.shard_optimizer_state};
  if (options.optimizer == "adam") {
    return std::make_unique<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = options.learning_rate}, state);
  }
  if (options.optimizer == "sgd") {
    return std::make_unique<optimizers::SGD>(
        optimizers::SGDOptions{.learning_rate = options.learning_rate, .momentum = options.momentum}, state);
  }
  throw distribute::InvalidArgumentError(
      absl::StrCat("optimizer \"", options.optimizer, "\" is not one of \"adam\" and \"sgd\""));
}

Trainer::Trainer(distribute::Strategy& strategy, const FashionMnist& data, TrainerOptions options)
    : strategy_(strategy), data_(data), options_(std::move(options)) {
  StrategyScope scope = strategy_.scope();
  model_ = std::make_unique<Mlp>(options_.seed, options_.hidden);
  variables_ = model_->trainable_variables();
  optimizer_ = make_optimizer(options_);
  optimizer_->build(variables_);
  epoch_ = Variable(std::int64_t{0}, {.name = "epoch", .trainable = false});
  const auto local_replicas = static_cast<std::size_t>(strategy_.extended().num_local_replicas());
  workspaces_.resize(local_replicas);
  collective_seconds_.assign(local_replicas, 0.0);
}

Tensor Trainer::train_step(const Batch& batch, std::int64_t global_rows) {
  distribute::ReplicaContext& ctx = *distribute::get_replica_context();
  const auto local = static_cast<std::size_t>(ctx.local_replica_id());
  Workspace& workspace = workspaces_[local];
  double& collective_seconds = collective_seconds_[local];

  const distribute::CommunicationOptions communication{.compression = options_.compression};
  if (options_.overlap) {
    // Each gradient joins a bucket as the backward pass makes it, and a full bucket's all_reduce
    // (reduce_scatter with sharded state) runs while the layers below are computed.
    GradientBuckets buckets =
        optimizer_->gradient_buckets({.bucket_bytes = options_.bucket_bytes, .communication = communication});
    Tensor loss = forward_backward(*model_, batch.first, batch.second, global_rows, workspace,
                                   [&buckets](const Variable& v, const Tensor& gradient) { buckets.add(v, gradient); });
    const auto start = Clock::now();
    optimizer_->apply_gradients(buckets);
    collective_seconds += seconds_since(start);
    return loss;
  }

  Tensor loss = forward_backward(*model_, batch.first, batch.second, global_rows, workspace);
  if (options_.shard_optimizer_state) {
    // apply_gradients takes no CommunicationOptions; a bucket that never fills runs its one
    // reduce_scatter of every gradient with them. The all_gather and the update of this
    // replica's shard follow: the whole step counts as collective time.
    const auto start = Clock::now();
    GradientBuckets buckets = optimizer_->gradient_buckets(
        {.bucket_bytes = std::numeric_limits<std::int64_t>::max(), .communication = communication});
    for (std::size_t i = 0; i < variables_.size(); ++i) buckets.add(variables_[i], workspace.gradients[i]);
    optimizer_->apply_gradients(buckets);
    collective_seconds += seconds_since(start);
    return loss;
  }
  const auto start = Clock::now();
  ctx.all_reduce_in_place(ReduceOp::kSum, workspace.gradients, communication);
  collective_seconds += seconds_since(start);
  std::vector<std::pair<Tensor, Variable>> grads_and_vars;
  grads_and_vars.reserve(variables_.size());
  for (std::size_t i = 0; i < variables_.size(); ++i) grads_and_vars.emplace_back(workspace.gradients[i], variables_[i]);
  optimizer_->apply_gradients(grads_and_vars, {.skip_gradients_aggregation = true});
  return loss;
}

EpochStats Trainer::train_epoch(const std::function<void(const StepProgress&)>& on_step, std::int64_t max_steps) {
  StrategyScope scope = strategy_.scope();
  EpochPlan plan{.epoch = epochs_done() + 1,
                 .seed = options_.seed,
                 .global_batch_size = options_.global_batch_size,
                 .steps = steps_per_epoch()};
  if (max_steps > 0) plan.steps = std::min(plan.steps, max_steps);
  // The steps of this epoch that a checkpoint holds already, when a preempted run left it half done
  // (or an elastic job's workers changed in it).
  const std::int64_t steps_done = handler_ != nullptr ? handler_->total_run_calls() : steps_done_;
  plan.first_step = std::clamp<std::int64_t>(steps_done - epochs_done() * steps_per_epoch(), 0, plan.steps);
  std::fill(collective_seconds_.begin(), collective_seconds_.end(), 0.0);
  EpochStats stats = run_epoch(
      strategy_, data_.train, plan, [this](const Batch& b, std::int64_t rows) { return train_step(b, rows); }, handler_,
      on_step);
  const double collective_seconds = std::accumulate(collective_seconds_.begin(), collective_seconds_.end(), 0.0) /
                                    static_cast<double>(collective_seconds_.size());
  stats.collective_share = collective_seconds / stats.seconds;
  epoch_.assign(std::int64_t{stats.epoch});
  stats.test_accuracy = evaluate();
  return stats;
}

double Trainer::evaluate() {
  StrategyScope scope = strategy_.scope();
  return accuracy(strategy_, data_.test, options_.eval_batch_size, [this](const Batch& b) {
    const auto local = static_cast<std::size_t>(distribute::get_replica_context()->local_replica_id());
    return count_correct(*model_, b.first, b.second, workspaces_[local]);
  });
}

int Trainer::epochs_done() const { return static_cast<int>(epoch_.value().item<std::int64_t>()); }

std::int64_t Trainer::steps_per_epoch() const {
  return fashion_mnist::steps_per_epoch(data_.train.size(), options_.global_batch_size);
}

distribute::Checkpoint Trainer::checkpoint() {
  std::vector<std::pair<std::string, Variable>> named;
  for (const Variable& v : variables_) named.emplace_back(v.name(), v);
  named.emplace_back(epoch_.name(), epoch_);
  return distribute::Checkpoint(std::move(named), optimizer_->checkpoint_state());
}

void Trainer::save(const std::filesystem::path& path) {
  StrategyScope scope = strategy_.scope();
  checkpoint().save(path);
}

void Trainer::restore(const std::filesystem::path& path) {
  StrategyScope scope = strategy_.scope();
  checkpoint().restore(path);
}

}  // namespace fashion_mnist
