// PreemptionCheckpointHandler on one process: a termination (a watcher that fires, or a real
// SIGTERM) saves after the next step and calls exit_fn; a new handler restores the step count;
// a signal during a save leaves a whole file and asks for another save; run returns what
// strategy.run returns; save_checkpoint_if_preempted counts and saves; a grace
// period keeps training before it saves (an endless one too); the SIGTERM disposition is restored,
// also by a constructor that throws, and a SIGTERM that no save answered reaches it; every error by
// type and message. Killed and relaunched jobs, on several workers too, are in preemption_test.sh.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <limits>
#include <filesystem>
#include <string>
#include <thread>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/files.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

namespace fs = std::filesystem;
using testing::cpu_devices;
using testing::expect_error;

class PreemptionTest : public testing::ScratchDirectoryTest {
 protected:
  // One step: w grows by the sum over the replicas of their id + 1 (each replica adds that sum,
  // and ONLY_FIRST_REPLICA keeps one).
  static void step(Variable& w) {
    ReplicaContext& ctx = *get_replica_context();
    const float sum = ctx.all_reduce(ReduceOp::kSum, static_cast<float>(ctx.replica_id_in_sync_group() + 1));
    w.assign_add(sum);
  }
};

// Counts the SIGTERMs delivered to the disposition it installs, which stands for whatever the
// process had before a handler (SIG_DFL would end the test binary); puts the original back.
class CountingSigterm {
 public:
  CountingSigterm() {
    count_ = 0;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    EXPECT_EQ(::sigaction(SIGTERM, &action, &original_), 0);
  }
  ~CountingSigterm() { ::sigaction(SIGTERM, &original_, nullptr); }
  CountingSigterm(const CountingSigterm&) = delete;
  CountingSigterm& operator=(const CountingSigterm&) = delete;

  int count() const { return count_; }
  // Whether SIGTERM's disposition is this counter's.
  bool installed() const {
    struct sigaction now {};
    EXPECT_EQ(::sigaction(SIGTERM, nullptr, &now), 0);
    return now.sa_handler == on_signal;
  }

 private:
  static void on_signal(int) { count_ = count_ + 1; }
  static inline volatile std::sig_atomic_t count_ = 0;
  struct sigaction original_ {};
};

TEST_F(PreemptionTest, AWatcherThatFiresSavesAfterTheStepAndCallsExitFn) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w", .aggregation = VariableAggregation::kOnlyFirstReplica});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  int polls = 0;
  int exits = 0;
  std::int64_t exited_at = -1;
  PreemptionCheckpointHandler* self = nullptr;
  PreemptionCheckpointHandler handler(strategy, manager,
                                      {.termination_watcher_fn = [&] { return ++polls == 4; },
                                       .exit_fn = [&] {
                                         ++exits;
                                         exited_at = self->total_run_calls();
                                       }});
  self = &handler;
  EXPECT_EQ(handler.total_run_calls(), 0) << "a fresh start";
  for (int s = 0; s < 6; ++s) handler.run([&] { step(w); });
  EXPECT_EQ(exits, 1);
  EXPECT_EQ(exited_at, 4) << "the watcher fired before step 4, which ran, then the save";
  EXPECT_EQ(handler.total_run_calls(), 6);
  EXPECT_EQ(files(), (std::vector<std::string>{"ckpt-4.safetensors", "ckpt.index.json"}));

  w.assign(0.0f);
  CheckpointManager relaunched_manager(Checkpoint({{"w", w}}), dir());
  PreemptionCheckpointHandler relaunched(strategy, relaunched_manager, {.termination_watcher_fn = [] { return false; }});
  EXPECT_EQ(relaunched.total_run_calls(), 4) << "restored with the checkpoint";
  EXPECT_EQ(w.value().item<float>(), 12.0f) << "4 steps of 1 + 2";
}

TEST_F(PreemptionTest, SigtermSavesAtTheNextStepAndTheHandlerRestoresTheDisposition) {
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &before), 0);
  {
    MirroredStrategy strategy(cpu_devices(2));
    StrategyScope scope = strategy.scope();
    Variable w(0.0f, {.name = "w", .aggregation = VariableAggregation::kOnlyFirstReplica});
    CheckpointManager manager(Checkpoint({{"w", w}}), dir());
    int exits = 0;
    PreemptionCheckpointHandler handler(strategy, manager, {.exit_fn = [&] { ++exits; }});
    handler.run([&] { step(w); });
    ASSERT_EQ(::raise(SIGTERM), 0) << "the handler's SIGTERM handler only raises a flag";
    EXPECT_EQ(exits, 0) << "nothing is saved inside the signal handler";
    handler.run([&] { step(w); });
    EXPECT_EQ(exits, 1);
    EXPECT_EQ(manager.latest_checkpoint(), file("ckpt-2.safetensors"));
    handler.run([&] { step(w); });
    EXPECT_EQ(exits, 1) << "one signal, one save";
    EXPECT_EQ(manager.checkpoints().size(), 1u);
  }
  struct sigaction after {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler) << "the previous SIGTERM disposition is back";
}

TEST_F(PreemptionTest, ASignalDuringASaveDoesNotTearItAndAsksForAnotherSave) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w", .aggregation = VariableAggregation::kOnlyFirstReplica});
  int reads = 0;
  // State whose read, inside the save, delivers SIGTERM to this process the first time.
  Saveable signalling(DType::kFloat32, Shape(), [&] {
    if (++reads == 1) ::raise(SIGTERM);
    return Tensor::scalar(7.0f, Device::cpu());
  }, [](const Tensor&) {});
  CheckpointManager manager(Checkpoint({{"w", w}}, {{"signalling", signalling}}), dir());
  int exits = 0;
  PreemptionCheckpointHandler handler(strategy, manager, {.exit_fn = [&] { ++exits; }});
  ASSERT_EQ(::raise(SIGTERM), 0);
  handler.run([&] { step(w); });
  EXPECT_EQ(exits, 1) << "the first signal's save";
  EXPECT_EQ(reads, 1) << "the second signal came during that save";
  // The file is whole: it restores, with step 1's values.
  Variable restored(0.0f, {.name = "w"});
  std::int64_t steps = 0;
  const auto ignored = [] { return Tensor(); };
  Checkpoint({{"w", restored}},
             {{"signalling", Saveable(DType::kFloat32, Shape(), ignored,
                                      [](const Tensor& v) { EXPECT_EQ(v.item<float>(), 7.0f); })},
              {"preemption/total_run_calls", Saveable(DType::kInt64, Shape(), ignored,
                                                      [&](const Tensor& v) { steps = v.item<std::int64_t>(); })}})
      .restore(file("ckpt-1.safetensors"));
  EXPECT_EQ(restored.value().item<float>(), 3.0f);
  EXPECT_EQ(steps, 1);
  handler.run([&] { step(w); });
  EXPECT_EQ(exits, 2) << "the signal during the save asked for another";
  EXPECT_EQ(manager.latest_checkpoint(), file("ckpt-2.safetensors"));
}

TEST_F(PreemptionTest, RunReturnsWhatStrategyRunReturns) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w"});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  PreemptionCheckpointHandler handler(strategy, manager, {.termination_watcher_fn = [] { return false; }});
  const PerReplica<int> ids = handler.run([] { return get_replica_context()->replica_id_in_sync_group(); });
  EXPECT_EQ(ids.values(), (std::vector<int>{0, 1}));
  EXPECT_EQ(handler.total_run_calls(), 1);
}

TEST_F(PreemptionTest, SaveCheckpointIfPreemptedCountsStepsOfALoopThatRunsThemItself) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w", .aggregation = VariableAggregation::kOnlyFirstReplica});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  bool told = false;
  int exits = 0;
  PreemptionCheckpointHandler handler(strategy, manager,
                                      {.termination_watcher_fn = [&] { return told; }, .exit_fn = [&] { ++exits; }});
  for (int s = 0; s < 3; ++s) {
    strategy.run([&] { step(w); });
    handler.save_checkpoint_if_preempted();
  }
  EXPECT_EQ(exits, 0);
  told = true;
  strategy.run([&] { step(w); });
  handler.save_checkpoint_if_preempted();
  EXPECT_EQ(exits, 1);
  EXPECT_EQ(manager.latest_checkpoint(), file("ckpt-4.safetensors"));
}

TEST_F(PreemptionTest, AGracePeriodKeepsTrainingUntilShortlyBeforeItsEnd) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w", .aggregation = VariableAggregation::kOnlyFirstReplica});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  bool told = false;
  bool exited = false;
  // exit_fn runs once the save is written: the moment the grace period must not have passed.
  std::chrono::steady_clock::time_point saved;
  PreemptionCheckpointHandler handler(strategy, manager,
                                      {.termination_watcher_fn = [&] { return told; },
                                       .exit_fn =
                                           [&] {
                                             saved = std::chrono::steady_clock::now();
                                             exited = true;
                                           },
                                       .grace_period = std::chrono::seconds(2)});
  manager.save(0, false);  // a save the handler has timed
  told = true;
  const auto signalled = std::chrono::steady_clock::now();
  int steps_after = 0;
  while (!exited && steps_after < 1000) {
    handler.run([&] { step(w); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ++steps_after;
  }
  const auto waited = saved - signalled;
  EXPECT_TRUE(exited);
  EXPECT_GT(steps_after, 1) << "the grace period was used for training";
  EXPECT_LT(waited, std::chrono::seconds(2)) << "the save came before the grace period ended";
}

TEST_F(PreemptionTest, AGracePeriodWithNoSaveTimedYetSavesAtOnce) {
  MirroredStrategy strategy(cpu_devices(1));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w"});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  int exits = 0;
  PreemptionCheckpointHandler handler(strategy, manager,
                                      {.termination_watcher_fn = [] { return true; },
                                       .exit_fn = [&] { ++exits; },
                                       .grace_period = std::chrono::seconds(3600)});
  handler.run([] {});
  EXPECT_EQ(exits, 1);
}

TEST_F(PreemptionTest, WithNoExitFnTheSaveThrowsRestartRequestedThatUnwindsToTheCaller) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w", .aggregation = VariableAggregation::kOnlyFirstReplica});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  int polls = 0;
  int steps = 0;
  try {
    PreemptionCheckpointHandler handler(strategy, manager, {.termination_watcher_fn = [&] { return ++polls == 2; }});
    for (; steps < 5; ++steps) handler.run([&] { step(w); });
    ADD_FAILURE() << "the handler never stopped the loop";
  } catch (const std::exception& e) {
    FAIL() << "RestartRequested is no std::exception, so that a loop's catch lets it pass: " << e.what();
  } catch (const RestartRequested& request) {
    EXPECT_EQ(request.exit_code(), kRestartExitCode);
  }
  EXPECT_EQ(steps, 1) << "the second step carried the stop, then the save threw out of run";
  EXPECT_EQ(manager.latest_checkpoint(), file("ckpt-2.safetensors"));
  // Unwound: the handler is gone, and the strategy goes on as before.
  PerReplica<int> ids = strategy.run([] { return get_replica_context()->replica_id_in_sync_group(); });
  EXPECT_EQ(ids.values(), (std::vector<int>{0, 1}));
}

TEST_F(PreemptionTest, ARestartRequestedNobodyCatchesStillExitsWithItsCode) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string directory = dir().string();
  EXPECT_EXIT(
      {
        // Thrown on a thread of its own, whose end nothing catches: std::terminate.
        std::thread([&] {
          MirroredStrategy strategy(cpu_devices(1));
          StrategyScope scope = strategy.scope();
          Variable w(0.0f, {.name = "w"});
          CheckpointManager manager(Checkpoint({{"w", w}}), directory);
          PreemptionCheckpointHandler handler(strategy, manager, {.termination_watcher_fn = [] { return true; }});
          handler.run([] {});
        }).join();
        std::exit(0);
      },
      ::testing::ExitedWithCode(kRestartExitCode), "");
}

TEST_F(PreemptionTest, EachHandlerKeepsItsOwnStopRequest) {
  // Handler a was told to terminate but has an hour of grace; b, on another strategy, was never
  // told. Neither may save: a's termination is not b's, whatever b's grace period.
  MirroredStrategy strategy_a(cpu_devices(1));
  MirroredStrategy strategy_b(cpu_devices(1));
  Variable w_a = [&] {
    StrategyScope scope = strategy_a.scope();
    return Variable(0.0f, {.name = "w"});
  }();
  Variable w_b = [&] {
    StrategyScope scope = strategy_b.scope();
    return Variable(0.0f, {.name = "w"});
  }();
  CheckpointManager manager_a(Checkpoint({{"w", w_a}}), dir() / "a");
  CheckpointManager manager_b(Checkpoint({{"w", w_b}}), dir() / "b");
  int exits_a = 0;
  int exits_b = 0;
  PreemptionCheckpointHandler a(strategy_a, manager_a,
                                {.termination_watcher_fn = [] { return true; },
                                 .exit_fn = [&] { ++exits_a; },
                                 .grace_period = std::chrono::seconds(3600)});
  PreemptionCheckpointHandler b(strategy_b, manager_b,
                                {.termination_watcher_fn = [] { return false; }, .exit_fn = [&] { ++exits_b; }});
  manager_a.save(0, false);  // a save a's handler has timed: it may use its grace period
  for (int s = 0; s < 3; ++s) {
    a.run([] {});
    b.run([] {});
  }
  EXPECT_EQ(exits_a, 0) << "a trains on in its grace period";
  EXPECT_EQ(exits_b, 0) << "b was never told to terminate";
  EXPECT_EQ(manager_b.latest_checkpoint(), std::nullopt);
}

TEST_F(PreemptionTest, Errors) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w"});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  expect_error<InvalidArgumentError>(
      [&] { PreemptionCheckpointHandler(strategy, manager, {.grace_period = std::chrono::seconds(-1)}); },
      {"PreemptionCheckpointHandler: grace_period is -1 s", "give 0"});
  {
    CheckpointManager first_manager(Checkpoint({{"w", w}}), dir() / "first");
    PreemptionCheckpointHandler first(strategy, first_manager);
    CheckpointManager second_manager(Checkpoint({{"w", w}}), dir() / "second");
    expect_error<FailedPreconditionError>([&] { PreemptionCheckpointHandler second(strategy, second_manager); },
                                          {"another handler watches SIGTERM already", "termination_watcher_fn"});
    PreemptionCheckpointHandler watching(strategy, second_manager, {.termination_watcher_fn = [] { return false; }});
    expect_error<InvalidArgumentError>(
        [&] { PreemptionCheckpointHandler again(strategy, second_manager, {.termination_watcher_fn = [] { return false; }}); },
        {"the name 'preemption/total_run_calls' is given twice"});
  }
  strategy.run([&] {
    expect_error<FailedPreconditionError>([&] { PreemptionCheckpointHandler inside(strategy, manager); },
                                          {"PreemptionCheckpointHandler: called inside a replica's fn"});
  });
  // A checkpoint saved without the handler's step count is of another model.
  CheckpointManager plain(Checkpoint({{"w", w}}), dir() / "plain");
  plain.save();
  CheckpointManager later(Checkpoint({{"w", w}}), dir() / "plain");
  expect_error<InvalidArgumentError>(
      [&] { PreemptionCheckpointHandler handler(strategy, later, {.termination_watcher_fn = [] { return false; }}); },
      {"'preemption/total_run_calls': in the checkpoint, not in the file"});
}

// A constructor that throws after it installed its SIGTERM handler (restoring a checkpoint
// without the step count, or one that cannot be read) puts the previous disposition back: a
// SIGTERM then reaches it, and the next handler may watch SIGTERM.
TEST_F(PreemptionTest, AConstructorThatThrowsPutsTheSigtermDispositionBack) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w"});
  CheckpointManager plain(Checkpoint({{"w", w}}), dir() / "plain");
  plain.save();
  CheckpointManager corrupt(Checkpoint({{"w", w}}), dir() / "corrupt");
  corrupt.save();
  testing::write_bytes(dir() / "corrupt" / "ckpt-1.safetensors", "not a checkpoint");
  CountingSigterm previous;
  {
    CheckpointManager without_count(Checkpoint({{"w", w}}), dir() / "plain");
    expect_error<InvalidArgumentError>([&] { PreemptionCheckpointHandler handler(strategy, without_count); },
                                       {"'preemption/total_run_calls': in the checkpoint, not in the file"});
  }
  EXPECT_TRUE(previous.installed()) << "the handler's SIGTERM handler was left behind";
  {
    CheckpointManager unreadable(Checkpoint({{"w", w}}), dir() / "corrupt");
    expect_error<DataLossError>([&] { PreemptionCheckpointHandler handler(strategy, unreadable); },
                                {"CheckpointManager::restore_or_initialize: none of the 1 checkpoints"});
  }
  EXPECT_TRUE(previous.installed()) << "the handler's SIGTERM handler was left behind";
  ASSERT_EQ(::raise(SIGTERM), 0);
  EXPECT_EQ(previous.count(), 1) << "SIGTERM reaches the disposition from before the handlers";
  CheckpointManager fresh(Checkpoint({{"w", w}}), dir() / "fresh");
  PreemptionCheckpointHandler next(strategy, fresh);
  EXPECT_FALSE(previous.installed()) << "the next handler watches SIGTERM";
}

// A SIGTERM that arrived while a handler watched, and that no save answered, is raised again once
// the previous disposition is back: the process ends (or handles it) as it would have without the
// handler. A SIGTERM that a save answered is not.
TEST_F(PreemptionTest, ASigtermNoSaveAnsweredReachesThePreviousDispositionWhenTheHandlerGoes) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w", .aggregation = VariableAggregation::kOnlyFirstReplica});
  CountingSigterm previous;
  {
    CheckpointManager manager(Checkpoint({{"w", w}}), dir() / "answered");
    int exits = 0;
    PreemptionCheckpointHandler handler(strategy, manager, {.exit_fn = [&] { ++exits; }});
    ASSERT_EQ(::raise(SIGTERM), 0);
    handler.run([&] { step(w); });
    EXPECT_EQ(exits, 1);
  }
  EXPECT_EQ(previous.count(), 0) << "the save answered the signal";
  {
    CheckpointManager manager(Checkpoint({{"w", w}}), dir() / "pending");
    PreemptionCheckpointHandler handler(strategy, manager, {.exit_fn = [] {}});
    handler.run([&] { step(w); });
    ASSERT_EQ(::raise(SIGTERM), 0);
    EXPECT_EQ(previous.count(), 0) << "the handler's flag took it";
  }
  EXPECT_EQ(previous.count(), 1) << "the pending SIGTERM was raised again after the disposition came back";
  EXPECT_TRUE(previous.installed());
}

// seconds::max() is a grace period longer than any job: training goes on (no overflow into a
// period already over).
TEST_F(PreemptionTest, AnEndlessGracePeriodKeepsTraining) {
  MirroredStrategy strategy(cpu_devices(1));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w"});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  int exits = 0;
  PreemptionCheckpointHandler handler(strategy, manager,
                                      {.termination_watcher_fn = [] { return true; },
                                       .exit_fn = [&] { ++exits; },
                                       .grace_period = std::chrono::seconds::max()});
  manager.save(0, false);  // a save the handler has timed
  for (int s = 0; s < 5; ++s) handler.run([] {});
  EXPECT_EQ(exits, 0) << "the grace period has not ended";
  EXPECT_EQ(handler.total_run_calls(), 5);
}

// Inside a replica's fn each replica would count the step (and poll, and save) on its own thread:
// run and save_checkpoint_if_preempted belong after Strategy::run, like the constructor.
TEST_F(PreemptionTest, RunAndSaveCheckpointIfPreemptedInsideAReplicaAreFailedPreconditions) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(0.0f, {.name = "w"});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  int polls = 0;
  PreemptionCheckpointHandler handler(strategy, manager, {.termination_watcher_fn = [&] {
                                                            ++polls;
                                                            return false;
                                                          }});
  expect_error<FailedPreconditionError>(
      [&] { strategy.run([&] { handler.save_checkpoint_if_preempted(); }); },
      {"PreemptionCheckpointHandler::save_checkpoint_if_preempted: called inside a replica's fn",
       "call it once per step, after Strategy::run returns"});
  expect_error<FailedPreconditionError>(
      [&] { strategy.run([&] { handler.run([] {}); }); },
      {"PreemptionCheckpointHandler::run: called inside a replica's fn",
       "call it in place of Strategy::run, outside any replica's fn"});
  EXPECT_EQ(handler.total_run_calls(), 0) << "no step was counted";
  EXPECT_EQ(polls, 0) << "the watcher is polled once per step, outside the replicas";
  strategy.run([] {});
  handler.save_checkpoint_if_preempted();
  EXPECT_EQ(handler.total_run_calls(), 1);
}

}  // namespace
}  // namespace distribute
