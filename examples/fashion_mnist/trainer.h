// The training loop of the Fashion-MNIST example, written the way tf.distribute's custom training
// loop guide writes it: the model and optimizer are created under strategy.scope(), the data is a
// data::Dataset handed to experimental_distribute_dataset, and each step runs on every replica with
// strategy.run, all-reducing the gradients before the optimizer applies them. The loop does not
// depend on the strategy: MirroredStrategy on one process and MultiWorkerMirroredStrategy on many
// run it unchanged (epoch_loop.h holds the loops, which ../torch_fashion_mnist shares). main.cc
// drives it from flags; the test and bench/train_bench drive it directly.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "epoch_loop.h"
#include "idx.h"
#include "model.h"

namespace fashion_mnist {

struct TrainerOptions {
  std::int64_t global_batch_size = 128;  // split across every replica of every worker
  std::string optimizer = "adam";        // "adam", or "sgd" (with momentum)
  double learning_rate = 0.001;
  double momentum = 0.9;  // sgd only
  // The optimizer's slots in shards across the replicas (OptimizerOptions::shard_state): each
  // step reduce-scatters the gradients, updates this replica's shard and all-gathers the weights.
  // Checkpoints hold the whole slots either way.
  bool shard_optimizer_state = false;
  std::uint64_t seed = 1;  // the initial weights and each epoch's shuffle
  std::int64_t eval_batch_size = 1000;
  std::vector<std::int64_t> hidden = {256, 128};  // the hidden layers' widths: 784-256-128-10
  // The gradients summed in buckets while the backward pass goes on (Optimizer::gradient_buckets),
  // each bucket's collective starting once it holds bucket_bytes, instead of in one collective
  // after the pass. The same weights, bit for bit, in one process and across two workers
  // (docs/overlap.md: with three or more, the last bits may differ). Off by default: CPU replicas
  // sum on the cores the backward pass needs, and 2 replicas on 2 cores trained 2-4 % slower.
  bool overlap = false;
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  // How the gradients' float32 sums cross between workers; within a process they are exact.
  distribute::Compression compression = distribute::Compression::kNone;
};

// The optimizer `options` name (optimizer, learning_rate, momentum, shard_optimizer_state);
// InvalidArgumentError for a name other than "adam" and "sgd". Make it under the strategy's scope.
std::unique_ptr<distribute::optimizers::Optimizer> make_optimizer(const TrainerOptions& options);

class Trainer {
 public:
  // Creates the model and optimizer for `strategy` (under its scope). `data` must outlive the trainer.
  Trainer(distribute::Strategy& strategy, const FashionMnist& data, TrainerOptions options);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One pass over the training split in a shuffled order that depends only on the seed and the
  // epoch (so a resumed run sees the batches an uninterrupted one would), then evaluate().
  // `max_steps` > 0 stops the epoch early, after that many steps. With a preemption handler
  // (run_steps_through) each step goes through it, and an epoch that a preempted run left half
  // done starts at the step after its checkpoint: the steps before are skipped, not trained again.
  EpochStats train_epoch(const std::function<void(const StepProgress&)>& on_step = {}, std::int64_t max_steps = 0);
  // The accuracy on the test split, counted by every replica into a sync-on-read variable.
  double evaluate();

  // The epochs finished so far (restored by restore()).
  int epochs_done() const;
  // The training steps of one epoch (the last batch may be smaller).
  std::int64_t steps_per_epoch() const;
  // Runs every training step through `handler` (null: strategy.run), whose total_run_calls()
  // counts the steps trained so far, over every epoch.
  void run_steps_through(distribute::PreemptionCheckpointHandler* handler) { handler_ = handler; }
  // The steps trained so far over every epoch, as an elastic job's committed progress says after
  // its workers changed (without a handler): the next epoch starts after them.
  void resume_after_steps(std::int64_t steps) { steps_done_ = steps; }
  // The state worth saving: weights, the optimizer's step and slots, and the epoch.
  distribute::Checkpoint checkpoint();
  // checkpoint().save(path): on every worker, of which the chief writes the file.
  void save(const std::filesystem::path& path);
  void restore(const std::filesystem::path& path);

  const Mlp& model() const { return *model_; }
  distribute::Strategy& strategy() const { return strategy_; }

 private:
  // One replica's step (a ReplicaStep): its batch's gradients, all-reduced, applied. Returns its
  // share of the loss.
  distribute::Tensor train_step(const Batch& batch, std::int64_t global_rows);

  distribute::Strategy& strategy_;
  distribute::PreemptionCheckpointHandler* handler_ = nullptr;
  std::int64_t steps_done_ = 0;  // without a handler: resume_after_steps
  const FashionMnist& data_;
  TrainerOptions options_;
  std::unique_ptr<Mlp> model_;
  std::vector<distribute::Variable> variables_;  // the model's trainable variables
  std::unique_ptr<distribute::optimizers::Optimizer> optimizer_;
  distribute::Variable epoch_;  // epochs finished, checkpointed with the weights
  std::vector<Workspace> workspaces_;          // one per local replica
  std::vector<double> collective_seconds_;     // one per local replica, written by its own thread
};

}  // namespace fashion_mnist
