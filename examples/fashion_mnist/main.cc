// train_fashion_mnist: trains the example's MLP on Fashion-MNIST with one replica per core (or
// --replicas), checkpointing every epoch; --device=gpu puts one replica on each GPU instead (or, on
// a machine with one GPU, --replicas logical GPUs of it). Built with distribute::mpi or
// distribute::gloo, --multi_worker runs the same loop under MultiWorkerMirroredStrategy, one worker
// per process started by mpirun, or by a shell loop with RANK, WORLD_SIZE and DISTRIBUTE_RENDEZVOUS. --checkpoint_dir survives preemption: SIGTERM to any worker saves after the
// next step and exits 42, and train_until_done.sh relaunches it from there.
//
//   ./build/default/examples/fashion_mnist/train_fashion_mnist --epochs=10
//   ./build/default/examples/fashion_mnist/train_fashion_mnist --device=gpu
//   ./build/default/examples/fashion_mnist/train_fashion_mnist --metrics=metrics.csv   # plot_metrics.py draws it
//   examples/fashion_mnist/train_until_done.sh mpirun -np 2 ./build/default/examples/fashion_mnist/train_fashion_mnist
//       --multi_worker --checkpoint_dir=/tmp/run --checkpoint_every=100    (one command line)
//
// The first prints, on the 2 cores of an AMD EPYC (Zen 5) VM (README.md: other CPUs print other digits):
//   epoch 1/10: loss 0.5098, test accuracy 0.8485, 73802 samples/s, collectives 7.6%, input wait 1.5%
//     slowest: replica 1, last in 75 % of collectives
//   ...
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "command_line.h"
#include "distribute/config.h"
#if DISTRIBUTE_HAS_GLOO
#include "distribute/elastic/elastic.h"
#endif
#include "idx.h"
#include "metrics_csv.h"
#include "trainer.h"

namespace {

// --hidden: the hidden layers' widths, "256,128".
struct HiddenWidths {
  std::vector<std::int64_t> widths;
};

bool AbslParseFlag(absl::string_view text, HiddenWidths* hidden, std::string* error) {
  if (text.empty()) {
    *error = "give at least one width, e.g. 256,128";
    return false;
  }
  std::vector<std::int64_t> widths;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int width = 0;
    if (!absl::SimpleAtoi(part, &width) || width < 1) {
      *error = absl::StrCat("'", part, "' is not a width; widths are whole numbers >= 1, e.g. 256,128");
      return false;
    }
    widths.push_back(width);
  }
  hidden->widths = std::move(widths);
  return true;
}

std::string AbslUnparseFlag(const HiddenWidths& hidden) { return absl::StrJoin(hidden.widths, ","); }

// --compression: distribute::Compression by the names a user types (distribute::parse_compression).
struct GradientCompression {
  distribute::Compression compression = distribute::Compression::kNone;
};

bool AbslParseFlag(absl::string_view text, GradientCompression* compression, std::string* error) {
  try {
    compression->compression = distribute::parse_compression(std::string_view(text.data(), text.size()));
    return true;
  } catch (const distribute::InvalidArgumentError& e) {
    *error = e.what();
    return false;
  }
}

std::string AbslUnparseFlag(const GradientCompression& compression) {
  return absl::AsciiStrToLower(distribute::compression_name(compression.compression));
}

// --elastic: "MIN:MAX", the bounds of an elastic job's workers.
struct ElasticRange {
  int min_workers = 0;  // 0: not elastic
  int max_workers = 0;
};

bool AbslParseFlag(absl::string_view text, ElasticRange* range, std::string* error) {
  if (text.empty()) {
    *range = {};
    return true;
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  ElasticRange parsed;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &parsed.min_workers) ||
      !absl::SimpleAtoi(parts[1], &parsed.max_workers) || parsed.min_workers < 1 ||
      parsed.max_workers < parsed.min_workers) {
    *error = "give the least and the most workers as MIN:MAX, 1 <= MIN <= MAX, e.g. 2:4";
    return false;
  }
  *range = parsed;
  return true;
}

std::string AbslUnparseFlag(const ElasticRange& range) {
  return range.min_workers == 0 ? "" : absl::StrCat(range.min_workers, ":", range.max_workers);
}

}  // namespace

ABSL_FLAG(int, replicas, 0, "replicas in this process, one thread each; 0: one per core (per GPU with --device=gpu)");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or gpu: replica k on GPU:k (with one GPU and more --replicas, that many logical GPUs of it)");
ABSL_FLAG(int, epochs, 10, "epochs to train, counting those of a resumed checkpoint");
ABSL_FLAG(int64_t, batch_size, 128, "the global batch, split across every replica");
ABSL_FLAG(double, learning_rate, 0.001, "the optimizer's learning rate");
ABSL_FLAG(std::string, optimizer, "adam", "adam, or sgd (momentum 0.9)");
ABSL_FLAG(std::string, checkpoint, "",
          "where to save the state after every epoch; default: fashion_mnist.safetensors in the temporary folder");
ABSL_FLAG(bool, resume, false, "start from --checkpoint instead of from scratch");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "keep numbered checkpoints in this folder (the newest 3) and survive preemption: resume from the newest "
          "when it holds one, and on SIGTERM to any worker save after the next step and exit 42 (relaunch with "
          "train_until_done.sh); instead of --checkpoint and --resume");
ABSL_FLAG(int64_t, checkpoint_every, 0,
          "with --checkpoint_dir: also save every N training steps (0: after each epoch only)");
ABSL_FLAG(bool, shard_optimizer_state, false,
          "keep the optimizer's slots in shards across the replicas (ZeRO-1): each replica updates its shard "
          "and the weights are all-gathered; the same results, 1/N of the slots per replica");
ABSL_FLAG(HiddenWidths, hidden, HiddenWidths{fashion_mnist::TrainerOptions{}.hidden},
          "the widths of the MLP's hidden layers, e.g. 2048,2048 for 784-2048-2048-10; a checkpoint restores "
          "only into the widths it was saved with");
ABSL_FLAG(bool, overlap, fashion_mnist::TrainerOptions{}.overlap,
          "sum the gradients in buckets while the backward pass goes on, each bucket's all-reduce starting "
          "once it holds --bucket_mb (PyTorch DDP's buckets); the same weights, bit for bit, as summing them "
          "after the pass. Off by default: replicas on CPU cores sum on the cores the backward pass needs, "
          "and 2 replicas on 2 cores trained 2-4 % slower with it");
ABSL_FLAG(double, bucket_mb, 25,
          "with --overlap: the MiB of gradients (fractions too, e.g. 0.5) that start a bucket's all-reduce");
ABSL_FLAG(GradientCompression, compression, GradientCompression{},
          "none, bf16 or fp16: how the gradients' sums cross between workers (--multi_worker), 16 bits a value "
          "on the wire with bf16 and fp16; within a process they are summed in float32 whatever this says");
ABSL_FLAG(ElasticRange, elastic, ElasticRange{},
          "MIN:MAX: train as an elastic job over Gloo (implies --multi_worker): a worker that dies or stops "
          "answering is left behind and the others go on from the last step, a worker started later joins at the "
          "next step; below MIN the job saves to --checkpoint and ends. Workers are started as for --multi_worker "
          "without mpirun (RANK, WORLD_SIZE, DISTRIBUTE_RENDEZVOUS); a worker joining later gets RANK=WORLD_SIZE-1");
ABSL_FLAG(std::string, metrics, "",
          "a CSV file to write a row per epoch to (loss, test accuracy, samples/s, collective and input-wait "
          "shares, seconds); plot_metrics.py draws it. With --resume, the rows of the checkpoint's epochs stay");

namespace {

using fashion_mnist::EpochStats;
using fashion_mnist::Progress;
using fashion_mnist::StepProgress;

using TrainEpochs =
    std::function<void(const std::function<void(const StepProgress&)>&, const std::function<void()>&)>;

#if DISTRIBUTE_HAS_GLOO
// --elastic: a MultiWorkerMirroredStrategy over Gloo whose workers may change; worker 0 of each
// generation prints the change.
std::unique_ptr<distribute::Strategy> make_elastic_strategy(const std::vector<std::string>& devices,
                                                            const ElasticRange& range) {
  distribute::MultiWorkerMirroredStrategyOptions options;
  options.local_devices = devices;
  options.backend = distribute::CollectiveBackend::kGloo;
  options.elastic.min_workers = range.min_workers;
  options.elastic.max_workers = range.max_workers;
  options.elastic.on_membership_change = [](const distribute::MembershipChange& change) {
    if (change.worker_id != 0 || change.generation == 0) return;
    std::printf("workers changed: generation %d, %d workers (were %d); joined [%s], left [%s]: %s\n",
                change.generation, change.num_workers, change.previous_num_workers,
                absl::StrJoin(change.joined, ", ").c_str(), absl::StrJoin(change.left, ", ").c_str(),
                change.reason.c_str());
    std::fflush(stdout);
  };
  return std::make_unique<distribute::MultiWorkerMirroredStrategy>(std::move(options));
}

// The epochs through run_elastic: a commit after every step and every epoch, and after a change of
// the workers the epochs go on from the committed step.
void train_elastically(distribute::Strategy& elastic_strategy, fashion_mnist::Trainer& trainer,
                       const std::filesystem::path& checkpoint, const TrainEpochs& train_epochs) {
  auto& strategy = static_cast<distribute::MultiWorkerMirroredStrategy&>(elastic_strategy);
  distribute::ElasticState state(strategy, trainer.checkpoint(), checkpoint);
  const std::int64_t steps_per_epoch = trainer.steps_per_epoch();
  distribute::run_elastic(strategy, state, [&] {
    trainer.resume_after_steps(state.progress.step);
    train_epochs(
        [&](const StepProgress& p) {
          state.progress.step = (p.epoch - 1) * steps_per_epoch + p.step;
          state.progress.epoch = p.epoch - 1;
          state.progress.input_position = p.samples;
          state.commit();
        },
        [&] {
          state.progress.epoch = trainer.epochs_done();
          state.commit();
        });
  });
}
#else
std::unique_ptr<distribute::Strategy> make_elastic_strategy(const std::vector<std::string>&, const ElasticRange&) {
  throw distribute::UnimplementedError(
      "--elastic: this build has no Gloo backend; install libgloo-dev and rebuild distribute");
}
void train_elastically(distribute::Strategy&, fashion_mnist::Trainer&, const std::filesystem::path&,
                       const TrainEpochs&) {}
#endif

int train() {
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "gpu") {
    throw distribute::InvalidArgumentError(absl::StrCat("--device=", device, ": the device is cpu or gpu"));
  }
  const bool on_gpus = device == "gpu";
  const int replicas = fashion_mnist::replicas_or_default(absl::GetFlag(FLAGS_replicas), on_gpus);
  const int epochs = absl::GetFlag(FLAGS_epochs);
  std::filesystem::path checkpoint = absl::GetFlag(FLAGS_checkpoint);
  const std::filesystem::path checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  const std::int64_t checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  if (!checkpoint_dir.empty() && (!checkpoint.empty() || absl::GetFlag(FLAGS_resume))) {
    throw distribute::InvalidArgumentError(
        "--checkpoint_dir keeps its own checkpoints and resumes from them: drop --checkpoint and --resume");
  }
  if (checkpoint_every < 0 || (checkpoint_every > 0 && checkpoint_dir.empty())) {
    throw distribute::InvalidArgumentError(absl::StrCat("--checkpoint_every=", checkpoint_every,
                                                        ": give a number of steps >= 0, with --checkpoint_dir"));
  }
  if (checkpoint.empty()) checkpoint = std::filesystem::temp_directory_path() / "fashion_mnist.safetensors";
  const double bucket_mb = absl::GetFlag(FLAGS_bucket_mb);
  const double bucket_bytes = std::round(bucket_mb * (1 << 20));
  if (!(bucket_bytes >= 1 && bucket_bytes < 0x1p62)) {
    throw distribute::InvalidArgumentError(
        absl::StrCat("--bucket_mb=", bucket_mb, ": give a number of MiB of at least one byte, e.g. 25 or 0.5"));
  }

  const ElasticRange elastic = absl::GetFlag(FLAGS_elastic);
  if (elastic.min_workers > 0 && !checkpoint_dir.empty()) {
    throw distribute::InvalidArgumentError(
        "--elastic keeps the job's state in memory across changes of its workers: drop --checkpoint_dir "
        "(--checkpoint is still saved after every epoch, and when fewer than MIN workers are left)");
  }
  if (elastic.min_workers > 0 && absl::GetFlag(FLAGS_shard_optimizer_state)) {
    throw distribute::InvalidArgumentError(
        "--elastic with --shard_optimizer_state: the optimizer's shards are cut for the replicas it started "
        "with, and an elastic job's replicas change; drop one of them");
  }
  std::unique_ptr<distribute::Strategy> strategy =
      elastic.min_workers > 0
          ? make_elastic_strategy(fashion_mnist::replica_devices(replicas, on_gpus), elastic)
          : fashion_mnist::make_strategy(fashion_mnist::replica_devices(replicas, on_gpus),
                                         absl::GetFlag(FLAGS_multi_worker));
  const bool chief = strategy->extended().should_save_summary();
  const Progress progress = fashion_mnist::shown_progress(*strategy, absl::GetFlag(FLAGS_progress));
  const fashion_mnist::FashionMnist data =
      fashion_mnist::load(absl::GetFlag(FLAGS_data_dir), absl::GetFlag(FLAGS_train_limit));

  fashion_mnist::TrainerOptions options;
  options.global_batch_size = absl::GetFlag(FLAGS_batch_size);
  options.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  options.optimizer = absl::GetFlag(FLAGS_optimizer);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.shard_optimizer_state = absl::GetFlag(FLAGS_shard_optimizer_state);
  options.hidden = absl::GetFlag(FLAGS_hidden).widths;
  options.overlap = absl::GetFlag(FLAGS_overlap);
  options.bucket_bytes = static_cast<std::int64_t>(bucket_bytes);
  options.compression = absl::GetFlag(FLAGS_compression).compression;
  fashion_mnist::Trainer trainer(*strategy, data, options);
  // With --checkpoint_dir: numbered checkpoints, and every step through the preemption handler,
  // which restores the newest checkpoint now.
  std::optional<distribute::CheckpointManager> manager;
  std::optional<distribute::PreemptionCheckpointHandler> handler;
  if (!checkpoint_dir.empty()) {
    distribute::CheckpointManagerOptions manager_options{.max_to_keep = 3};
    if (checkpoint_every > 0) manager_options.checkpoint_interval = checkpoint_every;
    distribute::StrategyScope scope = strategy->scope();
    manager.emplace(trainer.checkpoint(), checkpoint_dir, manager_options);
    handler.emplace(*strategy, *manager);
    trainer.run_steps_through(&*handler);
  } else if (absl::GetFlag(FLAGS_resume)) {
    trainer.restore(checkpoint);
  }
  // Before the first epoch, so that a path that cannot be written ends the run at once.
  std::optional<fashion_mnist::MetricsCsv> metrics;
  const std::string metrics_path = absl::GetFlag(FLAGS_metrics);
  if (chief && !metrics_path.empty()) metrics.emplace(metrics_path, trainer.epochs_done());

  if (chief) {
    std::printf("MLP %s on Fashion-MNIST (%lld training, %lld test images) with %s: %d replicas, "
                "global batch %lld, %s learning rate %g\n",
                absl::StrJoin(trainer.model().widths, "-").c_str(), static_cast<long long>(data.train.size()),
                static_cast<long long>(data.test.size()), strategy->name().c_str(), strategy->num_replicas_in_sync(),
                static_cast<long long>(options.global_batch_size), options.optimizer.c_str(), options.learning_rate);
    if (handler && handler->total_run_calls() > 0) {
      std::printf("resumed from %s at step %lld (epoch %d, step %lld of it)\n",
                  manager->latest_checkpoint()->c_str(), static_cast<long long>(handler->total_run_calls()),
                  trainer.epochs_done() + 1,
                  static_cast<long long>(handler->total_run_calls() - trainer.epochs_done() * trainer.steps_per_epoch()));
    } else if (trainer.epochs_done() > 0) {
      std::printf("resumed from %s after epoch %d\n", checkpoint.c_str(), trainer.epochs_done());
    }
    std::fflush(stdout);
  }
  double accuracy = 0;
  // The epochs left; after_step and after_epoch (an elastic job's commits) follow each step, and
  // each epoch once it is saved.
  const auto train_epochs = [&](const std::function<void(const StepProgress&)>& after_step,
                                const std::function<void()>& after_epoch) {
    while (trainer.epochs_done() < epochs) {
      strategy->extended().reset_collective_stats();
      const EpochStats stats = trainer.train_epoch([&](const StepProgress& p) {
        if (progress == Progress::kBar) fashion_mnist::draw_progress(p, epochs);
        if (manager && checkpoint_every > 0) manager->save(handler->total_run_calls());
        if (after_step) after_step(p);
      });
      if (manager) {
        manager->save(handler->total_run_calls(), /*check_interval=*/false);
      } else {
        trainer.save(checkpoint);
      }
      if (after_epoch) after_epoch();
      accuracy = stats.test_accuracy;
      if (metrics) metrics->write(stats);
      // An elastic job's worker 0 may be another process by now.
      if ((progress == Progress::kBar || progress == Progress::kLines) &&
          strategy->extended().should_save_summary()) {
        fashion_mnist::print_epoch(stats, epochs, progress == Progress::kBar, strategy->extended().collective_stats());
      }
    }
  };
  if (elastic.min_workers > 0) {
    train_elastically(*strategy, trainer, checkpoint, train_epochs);
  } else {
    train_epochs({}, {});
  }
  if (accuracy == 0) accuracy = trainer.evaluate();  // resumed after the last epoch: nothing trained
  if (strategy->extended().should_save_summary()) {
    std::printf("test accuracy %.4f after %d epochs; checkpoint: %s\n", accuracy, trainer.epochs_done(),
                manager ? manager->latest_checkpoint()->c_str() : checkpoint.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return fashion_mnist::run_program(argc, argv, "Trains an MLP on Fashion-MNIST with distribute's MirroredStrategy.",
                                    __FILE__, train);
}
