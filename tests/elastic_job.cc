// An elastic training job, for tests/elastic_test.sh: SGD with momentum on one weight vector,
// through run_elastic and an ElasticState, whose workers are killed, stopped or added while it
// trains. Each step's global batch is 8 samples with small integer gradients, split among however
// many replicas there are, so every step's summed gradient is exact whatever the workers; the
// final weights must then equal, bit for bit, those of one replica that applied the whole batch
// each step (computed here at the end): no step's gradient lost or counted twice.
//
//   elastic_job --steps=40 --min_workers=2 [--max_workers=0] [--timeout=3] [--step_ms=0]
//               [--local_replicas=1] [--die_worker=R --die_step=S] [--stop_worker=R --stop_step=S]
//               [--save_path=F] [--rendezvous_timeout=30]
//
// Workers are started with RANK, WORLD_SIZE and DISTRIBUTE_RENDEZVOUS (tests/launch_workers.sh). The
// worker of RANK --die_worker sends itself SIGKILL before step S (--stop_worker: SIGSTOP), once.
// Each worker prints its membership changes, "recovered in X s" (from its last commit before a
// change that lost workers to its first commit after it), "joined in X s" for a newcomer (from
// its start to its first generation), and at the end "final ok" or "final MISMATCH" with the
// weights. Exit 0; 3 for an UnavailableError (the job ended below min_workers or without its
// store), 1 for any other error.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_join.h"
#include "distribute/distribute.h"
#include "distribute/elastic/elastic.h"
#include "distribute/strategy/multi_worker_mirrored_strategy.h"

ABSL_FLAG(int64_t, steps, 40, "steps to train");
ABSL_FLAG(int, min_workers, 2, "options.elastic.min_workers");
ABSL_FLAG(int, max_workers, 0, "options.elastic.max_workers");
ABSL_FLAG(double, timeout, 3, "the collectives' timeout, seconds");
ABSL_FLAG(int, step_ms, 0, "sleep this long after each step");
ABSL_FLAG(int, local_replicas, 1, "replicas per worker");
ABSL_FLAG(int, die_worker, -1, "the RANK that sends itself SIGKILL before --die_step");
ABSL_FLAG(int64_t, die_step, -1, "");
ABSL_FLAG(int, stop_worker, -1, "the RANK that sends itself SIGSTOP before --stop_step");
ABSL_FLAG(int64_t, stop_step, -1, "");
ABSL_FLAG(std::string, save_path, "", "ElasticState's save_path");
ABSL_FLAG(int, rendezvous_timeout, 30, "options.gloo.rendezvous_timeout, seconds");

namespace distribute {
namespace {

constexpr int kSamples = 8;
constexpr std::int64_t kSize = 4;
constexpr double kLearningRate = 0.125;
constexpr double kMomentum = 0.5;

using Clock = std::chrono::steady_clock;
const Clock::time_point kStart = Clock::now();
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Sample i of step s's gradient: small integers, exact in float32 and in any sum of them.
float sample_gradient(std::int64_t step, int sample, std::int64_t k) {
  return static_cast<float>(((step * kSamples + sample) * (k + 1) + step) % 7 - 3);
}

// The weights of one replica applying each step's whole batch.
std::vector<float> reference(std::int64_t steps) {
  Variable w(Tensor::zeros(DType::kFloat32, Shape{kSize}, Device::cpu()), {.name = "w"});
  optimizers::SGD sgd({.learning_rate = kLearningRate, .momentum = kMomentum});
  for (std::int64_t s = 0; s < steps; ++s) {
    Tensor grad = Tensor::zeros(DType::kFloat32, Shape{kSize}, Device::cpu());
    for (int i = 0; i < kSamples; ++i) {
      for (std::int64_t k = 0; k < kSize; ++k) grad.data<float>()[k] += sample_gradient(s, i, k);
    }
    sgd.apply_gradients({{grad, w}});
  }
  return w.value().to_vector<float>();
}

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : -1;
}

int run() {
  const std::int64_t steps = absl::GetFlag(FLAGS_steps);
  const int rank = env_int("RANK");
  MultiWorkerMirroredStrategyOptions options;
  for (int i = 0; i < absl::GetFlag(FLAGS_local_replicas); ++i) options.local_devices.push_back("CPU:" + std::to_string(i));
  options.backend = CollectiveBackend::kGloo;
  options.communication.timeout = std::chrono::duration<double>(absl::GetFlag(FLAGS_timeout));
  options.gloo.rendezvous_timeout = std::chrono::seconds(absl::GetFlag(FLAGS_rendezvous_timeout));
  options.elastic.min_workers = absl::GetFlag(FLAGS_min_workers);
  options.elastic.max_workers = absl::GetFlag(FLAGS_max_workers);
  Clock::time_point last_commit = kStart;
  bool lost_workers = false;
  options.elastic.on_membership_change = [&](const MembershipChange& change) {
    std::printf("rank %d: generation %d, worker %d of %d (was %d); joined [%s], left [%s]: %s\n", rank,
                change.generation, change.worker_id, change.num_workers, change.previous_num_workers,
                absl::StrJoin(change.joined, ", ").c_str(), absl::StrJoin(change.left, ", ").c_str(),
                change.reason.c_str());
    if (change.previous_num_workers == 0 && change.generation > 0) std::printf("rank %d: joined in %.2f s\n", rank, since(kStart));
    lost_workers = !change.left.empty() || change.num_workers < change.previous_num_workers;
    std::fflush(stdout);
  };
  MultiWorkerMirroredStrategy strategy(options);
  StrategyScope scope = strategy.scope();
  Variable w(Tensor::zeros(DType::kFloat32, Shape{kSize}, Device::cpu()), {.name = "w"});
  optimizers::SGD sgd({.learning_rate = kLearningRate, .momentum = kMomentum});
  sgd.build({w});
  ElasticState state(strategy, Checkpoint({{"w", w}}, sgd.checkpoint_state()), absl::GetFlag(FLAGS_save_path));
  bool died = false;
  run_elastic(strategy, state, [&] {
    while (state.progress.step < steps) {
      const std::int64_t step = state.progress.step;
      if (!died && rank == absl::GetFlag(FLAGS_die_worker) && step == absl::GetFlag(FLAGS_die_step)) {
        ::kill(::getpid(), SIGKILL);
      }
      if (!died && rank == absl::GetFlag(FLAGS_stop_worker) && step == absl::GetFlag(FLAGS_stop_step)) {
        died = true;
        ::kill(::getpid(), SIGSTOP);
      }
      strategy.run([&] {
        ReplicaContext& ctx = *get_replica_context();
        Tensor grad = Tensor::zeros(DType::kFloat32, Shape{kSize}, Device::cpu());
        for (int i = ctx.replica_id_in_sync_group(); i < kSamples; i += ctx.num_replicas_in_sync()) {
          for (std::int64_t k = 0; k < kSize; ++k) grad.data<float>()[k] += sample_gradient(step, i, k);
        }
        sgd.apply_gradients({{grad, w}});
      });
      if (absl::GetFlag(FLAGS_step_ms) > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(absl::GetFlag(FLAGS_step_ms)));
      }
      state.progress.step = step + 1;
      state.progress.input_position = (step + 1) * kSamples;
      state.commit();
      if (lost_workers) {
        std::printf("rank %d: recovered in %.2f s\n", rank, since(last_commit));
        lost_workers = false;
      }
      last_commit = Clock::now();
    }
  });
  const std::vector<float> mine = w.value().to_vector<float>();
  const std::vector<float> expected = reference(steps);
  const std::int64_t iterations = sgd.iterations().value().item<std::int64_t>();
  const bool same = std::memcmp(mine.data(), expected.data(), mine.size() * sizeof(float)) == 0 && iterations == steps;
  std::printf("rank %d: final %s after %lld steps, %d workers, iterations %lld: w = %s (expected %s)\n", rank,
              same ? "ok" : "MISMATCH", static_cast<long long>(state.progress.step), strategy.extended().num_workers(),
              static_cast<long long>(iterations), absl::StrJoin(mine, " ").c_str(),
              absl::StrJoin(expected, " ").c_str());
  return same ? 0 : 1;
}

}  // namespace
}  // namespace distribute

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  try {
    return distribute::run();
  } catch (const distribute::UnavailableError& e) {
    std::printf("rank %s: UnavailableError: %s\n", std::getenv("RANK"), e.what());
    return 3;
  } catch (const std::exception& e) {
    std::printf("rank %s: error: %s\n", std::getenv("RANK"), e.what());
    return 1;
  }
}
