// train_torch_fashion_mnist: a LibTorch CNN trained on Fashion-MNIST under the library's
// strategies, as tf.distribute trains a Keras model built in strategy.scope(). The module is a plain
// torch::nn::Module; distribute::ReplicatedModule gives each replica (a thread, one per core by
// default, or --replicas) a clone whose parameters are the components of mirrored variables, so
// the library's optimizer (--optimizer=adam|sgd) updates every clone alike and a Checkpoint saves
// them by their state_dict names. Each step, every replica computes the loss of its slice of the
// global batch, and model.backward hands each gradient, as LibTorch's backward pass makes it, to
// the optimizer's gradient buckets, whose all-reduces overlap the rest of the pass. Built with
// distribute::mpi, --multi_worker runs the same loop under MultiWorkerMirroredStrategy, one worker
// per process that mpirun starts. --checkpoint_dir keeps numbered checkpoints, resumes from the
// newest, and survives preemption: SIGTERM to any worker saves after the next step and exits 42
// (../fashion_mnist/train_until_done.sh relaunches it until it is done).
//
//   ./build/default/examples/torch_fashion_mnist/train_torch_fashion_mnist          # 4 epochs, a replica per core
//   ./build/default/examples/torch_fashion_mnist/train_torch_fashion_mnist --replicas=1 --optimizer=sgd
//       --learning_rate=0.05 --checkpoint_dir=/tmp/cnn --metrics=cnn.csv         (one command line)
//   mpirun -np 2 ./build/default/examples/torch_fashion_mnist/train_torch_fashion_mnist --multi_worker
//       --replicas=1                                                              (one command line)
//
// The data is Debian's dataset-fashion-mnist (--data_dir to read it elsewhere); the reader, the
// epoch loop, the progress and the metrics file are those of ../fashion_mnist, whose MLP this CNN
// replaces. The first command took 37 s on the 2 idle cores of an AMD EPYC VM (2026-11-29; other
// CPUs print other digits), printing
//   CNN conv5x5/16-pool-conv5x5/32-pool-128-10 on Fashion-MNIST (60000 training, 10000 test images) with
//       MirroredStrategy(CPU:0, CPU:1): 2 replicas, 1 LibTorch threads each, global batch 64, adam learning
//       rate 0.002 (x 0.7 each epoch)
//   epoch 1/4: loss 0.4566, test accuracy 0.8702, 7591 samples/s, collectives 14.1%, input wait 1.1%
//   epoch 2/4: loss 0.2953, test accuracy 0.8923, 7697 samples/s, collectives 12.1%, input wait 1.3%
//   epoch 3/4: loss 0.2478, test accuracy 0.8995, 7305 samples/s, collectives 11.4%, input wait 0.7%
//   epoch 4/4: loss 0.2164, test accuracy 0.9062, 7274 samples/s, collectives 11.5%, input wait 1.4%
//   test accuracy 0.9062 after 4 epochs
// (each epoch's line followed by its slowest replica's). One replica (--replicas=1, LibTorch's 2
// threads) trained 5500-5600 samples/s, two 7700-8500; mpirun -np 2 with --replicas=1, the same
// losses as one process of 2 replicas, 6200.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cnn.h"
#include "command_line.h"
#include "distribute/distribute.h"
#include "distribute/torch/torch.h"
#include "epoch_loop.h"
#include "idx.h"
#include "metrics_csv.h"
#include "trainer.h"

ABSL_FLAG(int, replicas, 0, "replicas in this process, one thread each; 0: one per core");
ABSL_FLAG(int, epochs, 4, "epochs to train, counting those of a resumed checkpoint");
ABSL_FLAG(int64_t, batch_size, 64, "the global batch, split across every replica of every worker");
ABSL_FLAG(std::string, optimizer, "adam", "adam, or sgd (momentum 0.9)");
ABSL_FLAG(double, learning_rate, 0.002, "the optimizer's learning rate in the first epoch");
ABSL_FLAG(double, learning_rate_decay, 0.7,
          "the factor of the learning rate from one epoch to the next: epoch k trains with learning_rate x "
          "learning_rate_decay^(k-1)");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "keep numbered checkpoints in this folder (the newest 3, one after each epoch) and survive "
          "preemption: resume from the newest when it holds one, and on SIGTERM to any worker save after the "
          "next step and exit 42; empty: no checkpoints");
ABSL_FLAG(std::string, metrics, "",
          "a CSV file to write a row per epoch to (loss, test accuracy, samples/s, collective and input-wait "
          "shares, seconds); ../fashion_mnist/plot_metrics.py draws it. Resuming from --checkpoint_dir keeps the "
          "rows of the checkpoint's epochs");

namespace {

using distribute::ReplicatedModule;
using torch_fashion_mnist::Cnn;
using fashion_mnist::Batch;
using fashion_mnist::EpochStats;
using fashion_mnist::Progress;
using fashion_mnist::StepProgress;
namespace F = torch::nn::functional;

// A replica's images as LibTorch sees them, [n, 1, 28, 28], over the batch's memory (n may be 0).
at::Tensor images_of(const Batch& batch) {
  const at::Tensor rows = distribute::to_torch(batch.first);
  return rows.view({rows.size(0), 1, 28, 28});
}

// Its labels as the class indices cross_entropy takes (int64; the files' are int32: a copy).
at::Tensor labels_of(const Batch& batch) { return distribute::to_torch(batch.second).to(torch::kLong); }

// The global batch of the evaluation: on one replica its first layer's output, 500 x 16 x 24 x 24
// floats, stays under the 32 MiB that glibc serves from the heap once a ReplicatedModule set its
// thresholds (ReplicatedModuleOptions::keep_freed_memory).
constexpr std::int64_t kEvalBatch = 500;

// The test accuracy: every replica counts the examples of its part of each test batch that its
// clone predicts right.
double evaluate(distribute::Strategy& strategy, const ReplicatedModule<Cnn>& model, const fashion_mnist::Split& test) {
  for (int c = 0; c < model.num_clones(); ++c) model.clone(c)->eval();
  const double accuracy = fashion_mnist::accuracy(strategy, test, kEvalBatch, [&model](const Batch& batch) {
    const torch::NoGradGuard no_grad;  // per thread: each replica's own
    return model.local()->forward(images_of(batch)).argmax(1).eq(labels_of(batch)).sum().item<std::int64_t>();
  });
  for (int c = 0; c < model.num_clones(); ++c) model.clone(c)->train();
  return accuracy;
}

int train() {
  const int epochs = absl::GetFlag(FLAGS_epochs);
  const std::int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  if (batch_size < 1) {
    throw distribute::InvalidArgumentError(absl::StrCat("--batch_size=", batch_size, ": give a batch of at least 1"));
  }
  const double decay = absl::GetFlag(FLAGS_learning_rate_decay);
  if (!(decay > 0)) {
    throw distribute::InvalidArgumentError(absl::StrCat(
        "--learning_rate_decay=", decay, ": give a factor > 0, e.g. 0.7 (1 keeps the learning rate of every epoch)"));
  }
  const std::filesystem::path checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  const int replicas = fashion_mnist::replicas_or_default(absl::GetFlag(FLAGS_replicas), /*on_gpus=*/false);
  std::unique_ptr<distribute::Strategy> strategy = fashion_mnist::make_strategy(
      fashion_mnist::replica_devices(replicas, /*on_gpus=*/false), absl::GetFlag(FLAGS_multi_worker));
  const bool chief = strategy->extended().should_save_summary();
  const Progress progress = fashion_mnist::shown_progress(*strategy, absl::GetFlag(FLAGS_progress));
  const fashion_mnist::FashionMnist data =
      fashion_mnist::load(absl::GetFlag(FLAGS_data_dir), absl::GetFlag(FLAGS_train_limit));

  // The model and the optimizer under the strategy's scope: a clone per replica, mirrored variables.
  distribute::StrategyScope scope = strategy->scope();
  const std::uint64_t seed = absl::GetFlag(FLAGS_seed);
  ReplicatedModule<Cnn> model(
      [seed] {
        torch::manual_seed(seed);  // the clone of global replica 0 gives every clone its values
        return std::make_shared<Cnn>();
      });
  fashion_mnist::TrainerOptions optimizer_options;
  optimizer_options.optimizer = absl::GetFlag(FLAGS_optimizer);
  optimizer_options.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  const std::unique_ptr<distribute::optimizers::Optimizer> optimizer = fashion_mnist::make_optimizer(optimizer_options);
  optimizer->build(model.trainable_variables());

  // With --checkpoint_dir, every step goes through the preemption handler, which restores the
  // newest checkpoint now: its step count says where the run goes on.
  std::optional<distribute::CheckpointManager> manager;
  std::optional<distribute::PreemptionCheckpointHandler> handler;
  if (!checkpoint_dir.empty()) {
    manager.emplace(distribute::Checkpoint(model.named_variables(), optimizer->checkpoint_state()), checkpoint_dir,
                    distribute::CheckpointManagerOptions{.max_to_keep = 3});
    handler.emplace(*strategy, *manager);
  }
  const std::int64_t steps_per_epoch = fashion_mnist::steps_per_epoch(data.train.size(), batch_size);
  const std::int64_t steps_done = handler ? handler->total_run_calls() : 0;
  int epochs_done = static_cast<int>(steps_done / steps_per_epoch);
  // Before the first epoch, so that a path that cannot be written ends the run at once.
  std::optional<fashion_mnist::MetricsCsv> metrics;
  const std::string metrics_path = absl::GetFlag(FLAGS_metrics);
  if (chief && !metrics_path.empty()) metrics.emplace(metrics_path, epochs_done);

  if (chief) {
    std::printf("%s on Fashion-MNIST (%lld training, %lld test images) with %s: %d replicas, %d LibTorch "
                "threads each, global batch %lld, %s learning rate %g (x %g each epoch)\n",
                Cnn::kDescription, static_cast<long long>(data.train.size()), static_cast<long long>(data.test.size()),
                strategy->name().c_str(), strategy->num_replicas_in_sync(), at::get_num_threads(),
                static_cast<long long>(batch_size), optimizer_options.optimizer.c_str(),
                optimizer_options.learning_rate, decay);
    if (steps_done > 0) {
      std::printf("resumed from %s at step %lld (epoch %d, step %lld of it)\n", manager->latest_checkpoint()->c_str(),
                  static_cast<long long>(steps_done), epochs_done + 1,
                  static_cast<long long>(steps_done - epochs_done * steps_per_epoch));
    }
    std::fflush(stdout);
  }

  // One replica's step on its slice of the global batch. The loss is the slice's share of the
  // global batch's mean: its examples' summed cross entropy over the global batch's size.
  std::vector<double> collective_seconds(static_cast<std::size_t>(strategy->extended().num_local_replicas()));
  const fashion_mnist::ReplicaStep step = [&](const Batch& batch, std::int64_t global_rows) {
    const at::Tensor loss =
        F::cross_entropy(model.local()->forward(images_of(batch)), labels_of(batch),
                         F::CrossEntropyFuncOptions().reduction(torch::kSum)) /
        static_cast<double>(global_rows);
    auto buckets = optimizer->gradient_buckets();
    model.backward(loss, buckets);  // each bucket's all-reduce starts while the pass goes on
    const auto start = std::chrono::steady_clock::now();
    optimizer->apply_gradients(buckets);  // waits for the last buckets, then the same step on every clone
    collective_seconds[static_cast<std::size_t>(distribute::get_replica_context()->local_replica_id())] +=
        fashion_mnist::seconds_since(start);
    return distribute::from_torch(loss.detach());
  };

  std::optional<double> accuracy;  // the last epoch's
  while (epochs_done < epochs) {
    fashion_mnist::EpochPlan plan{
        .epoch = epochs_done + 1, .seed = seed, .global_batch_size = batch_size, .steps = steps_per_epoch};
    // The steps of this epoch that a checkpoint holds already, when a preempted run left it half done.
    if (handler) plan.first_step = handler->total_run_calls() - epochs_done * steps_per_epoch;
    optimizer->set_learning_rate(optimizer_options.learning_rate * std::pow(decay, epochs_done));
    strategy->extended().reset_collective_stats();
    std::fill(collective_seconds.begin(), collective_seconds.end(), 0.0);
    const auto on_step = [&](const StepProgress& p) {
      if (progress == Progress::kBar) fashion_mnist::draw_progress(p, epochs);
    };
    EpochStats stats =
        fashion_mnist::run_epoch(*strategy, data.train, plan, step, handler ? &*handler : nullptr, on_step);
    stats.collective_share = std::accumulate(collective_seconds.begin(), collective_seconds.end(), 0.0) /
                             static_cast<double>(collective_seconds.size()) / stats.seconds;
    stats.test_accuracy = evaluate(*strategy, model, data.test);
    accuracy = stats.test_accuracy;
    ++epochs_done;
    if (manager) manager->save(handler->total_run_calls());
    if (metrics) metrics->write(stats);
    if (progress == Progress::kBar || progress == Progress::kLines) {
      fashion_mnist::print_epoch(stats, epochs, progress == Progress::kBar, strategy->extended().collective_stats());
    }
  }
  if (!accuracy) accuracy = evaluate(*strategy, model, data.test);  // nothing to train: resumed after the last epoch
  if (chief) {
    std::printf("test accuracy %.4f after %d epochs%s%s\n", *accuracy, epochs_done, manager ? "; checkpoint: " : "",
                manager && manager->latest_checkpoint() ? manager->latest_checkpoint()->c_str() : "");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return fashion_mnist::run_program(argc, argv,
                                    "Trains a LibTorch CNN on Fashion-MNIST with distribute's MirroredStrategy.",
                                    __FILE__, train);
}
