// A training job that survives preemption, for tests/preemption_test.sh: Adam on one weight
// vector whose gradients depend on the step and the replica alone, through
// PreemptionCheckpointHandler and a CheckpointManager, so that a job killed at any step and
// relaunched ends with the same bytes as one that never stopped. Under mpirun each process is a
// worker of a MultiWorkerMirroredStrategy; alone it is a MirroredStrategy.
//
//   preemption_job --dir=D --out=F [--steps=40] [--local_replicas=2] [--size=4096]
//                  [--checkpoint_every=N] [--term_workers=0,1 --term_step=S]
//                  [--kill_worker=W --kill_step=S]
//
// --term_workers: those workers send themselves SIGTERM before step S (0-based) starts;
// --kill_worker: that worker sends itself SIGKILL before step S. Each worker prints
// "worker k resumed at step N" after the handler restored, and the chief writes the final weights
// to F and prints "seen <sum>", the sync-on-read count of the examples every replica took.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <vector>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "distribute/distribute.h"
#include "distribute/mpi/multi_worker_mirrored_strategy.h"

ABSL_FLAG(std::string, dir, "", "the checkpoint directory");
ABSL_FLAG(std::string, out, "", "where the chief writes the final weights");
ABSL_FLAG(int64_t, steps, 40, "steps to train");
ABSL_FLAG(int, local_replicas, 2, "replicas per worker");
ABSL_FLAG(int64_t, size, 4096, "parameters of the weight vector");
ABSL_FLAG(int64_t, checkpoint_every, 0, "also save every N steps (0: only when preempted)");
ABSL_FLAG(std::vector<std::string>, term_workers, {}, "workers that send themselves SIGTERM before --term_step");
ABSL_FLAG(int64_t, term_step, -1, "the step (0-based) before which they do");
ABSL_FLAG(int, kill_worker, -1, "the worker that sends itself SIGKILL before --kill_step");
ABSL_FLAG(int64_t, kill_step, -1, "the step (0-based) before which it does");

namespace distribute {
namespace {

struct Options {
  std::string dir = absl::GetFlag(FLAGS_dir);
  std::string out = absl::GetFlag(FLAGS_out);
  std::int64_t steps = absl::GetFlag(FLAGS_steps);
  int local_replicas = absl::GetFlag(FLAGS_local_replicas);
  std::int64_t size = absl::GetFlag(FLAGS_size);
  std::int64_t checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  std::vector<std::string> term_workers = absl::GetFlag(FLAGS_term_workers);
  std::int64_t term_step = absl::GetFlag(FLAGS_term_step);
  int kill_worker = absl::GetFlag(FLAGS_kill_worker);
  std::int64_t kill_step = absl::GetFlag(FLAGS_kill_step);
};

std::unique_ptr<Strategy> make_strategy(int local_replicas) {
  std::vector<std::string> devices;
  for (int i = 0; i < local_replicas; ++i) devices.push_back("CPU:" + std::to_string(i));
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    return std::make_unique<MultiWorkerMirroredStrategy>(MultiWorkerMirroredStrategyOptions{.local_devices = devices});
  }
  return std::make_unique<MirroredStrategy>(devices);
}

int run(const Options& o) {
  std::unique_ptr<Strategy> strategy = make_strategy(o.local_replicas);
  const int worker = strategy->extended().worker_id();
  StrategyScope scope = strategy->scope();
  Variable w(Tensor::zeros(DType::kFloat32, Shape{o.size}, Device::cpu()), {.name = "w"});
  Variable seen(0.0f, {.name = "seen",
                       .trainable = false,
                       .synchronization = VariableSynchronization::kOnRead,
                       .aggregation = VariableAggregation::kSum});
  optimizers::Adam adam({.learning_rate = 0.01});
  adam.build({w});
  CheckpointManagerOptions manager_options{.max_to_keep = 3};
  if (o.checkpoint_every > 0) manager_options.checkpoint_interval = o.checkpoint_every;
  CheckpointManager manager(Checkpoint({{"w", w}, {"seen", seen}}, adam.checkpoint_state()), o.dir, manager_options);
  PreemptionCheckpointHandler handler(*strategy, manager);
  std::printf("worker %d resumed at step %lld\n", worker, static_cast<long long>(handler.total_run_calls()));
  std::fflush(stdout);

  for (std::int64_t step = handler.total_run_calls(); step < o.steps; ++step) {
    const bool told = std::find(o.term_workers.begin(), o.term_workers.end(), std::to_string(worker)) !=
                      o.term_workers.end();
    if (step == o.term_step && told) ::kill(::getpid(), SIGTERM);
    if (step == o.kill_step && worker == o.kill_worker) ::kill(::getpid(), SIGKILL);
    handler.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      const int id = ctx.replica_id_in_sync_group();
      Tensor grad = Tensor::empty(DType::kFloat32, Shape{o.size}, Device::cpu());
      const Tensor mine = w.value();
      for (std::int64_t i = 0; i < o.size; ++i) {
        grad.data<float>()[i] = std::sin(static_cast<float>(step * 7 + id * 3 + i)) + 0.1f * mine.data<float>()[i];
      }
      adam.apply_gradients({{grad, w}});
      seen.assign_add(1.0f);
    });
    if (o.checkpoint_every > 0) manager.save(handler.total_run_calls());
  }
  const Tensor weights = w.value();
  const float total = seen.value().item<float>();
  if (strategy->extended().should_checkpoint()) {
    std::ofstream(o.out, std::ios::binary).write(static_cast<const char*>(weights.raw_data()),
                                                 static_cast<std::streamsize>(weights.nbytes()));
    std::printf("seen %.0f\n", total);
  }
  return 0;
}

}  // namespace
}  // namespace distribute

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const distribute::Options options;
  if (options.dir.empty() || options.out.empty()) {
    std::fprintf(stderr, "preemption_job: --dir and --out are required\n");
    return 2;
  }
  try {
    return distribute::run(options);
  } catch (const distribute::RestartRequested& request) {
    return request.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "preemption_job: %s\n", e.what());
    return 1;
  }
}
