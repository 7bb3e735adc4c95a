// PreemptionCheckpointHandler: a training loop that survives preemption
// (tf.distribute.experimental.PreemptionCheckpointHandler with its TerminationConfig). Clusters end
// jobs by sending SIGTERM, then SIGKILL after a grace period. With the handler, a termination signal
// to ANY worker makes every worker stop after the same step, save one checkpoint through the
// CheckpointManager, and exit with kRestartExitCode, the code a launcher script or scheduler takes
// for "relaunch me"; the relaunched job's handler restores that checkpoint and the loop goes on
// from the step after it.
//
//   CheckpointManager manager(Checkpoint({{"w", w}}), "/ckpt", {.max_to_keep = 2});
//   PreemptionCheckpointHandler handler(strategy, manager);     // restores the newest checkpoint
//   for (std::int64_t step = handler.total_run_calls(); step < steps; ++step) {
//     handler.run(train_step, batch_for(step));                // saves and exits when preempted
//   }
//
// How the workers agree, at no cost per step: each step's collectives already start with a vote
// among the workers, and a worker that was told to stop says so in its part of the vote. Every
// worker learns it in the same vote, so after that step every worker saves and exits; a signal
// that arrives after the step's last vote is carried by the next step's. On one process the next
// step saves. Two workers signalled at once give one save, and a signal during a save does not
// tear it (the file is replaced atomically and the signal only raises a flag).
//
// The step count (total_run_calls) is saved in the checkpoint under "preemption/total_run_calls",
// which the handler adds to the manager's Checkpoint: a loop that knows its steps resumes at
// total_run_calls() and skips the steps before it (with input that depends on the step alone,
// the weights then end bit-identical to an uninterrupted run's). Making, running and saving are
// collective across the workers, as CheckpointManager's operations are: every worker makes the
// handler and calls run (or save_checkpoint_if_preempted) once per step.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "distribute/checkpoint/checkpoint_manager.h"
#include "distribute/strategy/strategy.h"

namespace distribute {

namespace cluster {
class StopRequest;  // src/cluster/stop_request.h
}  // namespace cluster

// The exit code of a job that saved because it was preempted and must be relaunched to go on.
inline constexpr int kRestartExitCode = 42;

// What the handler throws, with no exit_fn, once the preemption checkpoint is saved: main catches
// it and returns exit_code(), so that the stack unwinds (the strategy, its replica threads and
// the MPI runtime end in order) before the process exits, as Python's sys.exit does in TF.
//
//   int main() {
//     try {
//       train();
//     } catch (const distribute::RestartRequested& request) {
//       return request.exit_code();
//     }
//   }
//
// It is neither a distribute::Error nor a std::exception, so that a catch of those inside the
// training loop lets it pass (as Python's `except Exception` lets SystemExit pass). Left uncaught,
// it still ends the process with exit_code(), through std::terminate's handler (which the handler
// sets the first time it throws one, passing any other exception to the one before), but then
// nothing is unwound.
class RestartRequested {
 public:
  int exit_code() const { return kRestartExitCode; }
};

struct TerminationConfig {
  // Polled before each step; true: this worker has been told to terminate. Unset: the handler
  // installs a SIGTERM handler (async-signal-safe: it only raises a flag), and the previous
  // SIGTERM disposition is restored when the handler object goes, or when its constructor throws.
  // A SIGTERM that arrived by then and that no save answered is raised again once that
  // disposition is back, so that it does what it would have done without the handler (by
  // default, end the process).
  std::function<bool()> termination_watcher_fn;
  // Called once the checkpoint is saved. Unset: throw RestartRequested (main returns its
  // exit_code(), kRestartExitCode). A function that returns lets the loop go on (the next
  // termination signal saves again).
  std::function<void()> exit_fn;
  // > 0: training goes on after the signal, until shortly before the grace period ends: before
  // each step, the handler stops once what is left of the period (counted from the signal) is at
  // most 2 x (the last save's time + the last step's time), a step lasting from one step's start
  // to the next's, both as this worker measured them. Before any save was timed it stops at the
  // next step. A period too long to count in nanoseconds (seconds::max(), about 292 years and
  // more) counts as the longest that is.
  std::chrono::seconds grace_period{0};
};

class PreemptionCheckpointHandler {
 public:
  // Adds the step count to manager's checkpoint and restores the newest checkpoint
  // (CheckpointManager::restore_or_initialize, with its errors). InvalidArgumentError for a negative
  // grace_period; FailedPreconditionError when another handler watches SIGTERM already (with no
  // termination_watcher_fn) or when called inside a replica's fn; Checkpoint::add's
  // InvalidArgumentError for a manager that had a handler already (one handler per manager);
  // FailedPreconditionError for a multi-worker strategy that has a handler already (one per
  // strategy: each worker's votes carry one stop request). When it throws, SIGTERM's disposition
  // is the one from before. Each handler keeps its own stop request: a watcher firing for one
  // leaves the others' alone.
  PreemptionCheckpointHandler(Strategy& strategy, CheckpointManager& manager, TerminationConfig config = {});
  ~PreemptionCheckpointHandler();
  PreemptionCheckpointHandler(const PreemptionCheckpointHandler&) = delete;
  PreemptionCheckpointHandler& operator=(const PreemptionCheckpointHandler&) = delete;

  // strategy.run(fn, args...), counted as one step; when any worker has been told to terminate,
  // every worker saves after the same step and calls exit_fn. Returns what strategy.run returns.
  // FailedPreconditionError inside a replica's fn: it takes the place of Strategy::run.
  template <class Fn, class... Args>
  auto run(Fn&& fn, Args&&... args);

  // The steps run so far, those of the restored checkpoint included.
  std::int64_t total_run_calls() const { return *total_run_calls_; }

  // For loops that call strategy.run themselves: call it once after each step, after run returns.
  // Counts the step; saves and calls exit_fn when a worker has been told to terminate (on several
  // workers the signal is seen one step later than through run, in the next step's vote).
  // FailedPreconditionError inside a replica's fn, where every replica would count the step.
  void save_checkpoint_if_preempted();

 private:
  // Installs the SIGTERM handler and puts the previous disposition back (preemption.cc).
  class SigtermWatch;

  // The public method that runs a step, for the error that names it.
  enum class StepCaller { kRun, kSaveCheckpointIfPreempted };
  // Before a step: polls the watcher and, when this worker is told to terminate and its grace
  // period is over, raises the stop request that the step's votes carry. FailedPreconditionError
  // naming the caller inside a replica's fn.
  void before_step(StepCaller caller);
  // After a step: counts it, and saves and exits when the workers agreed to stop.
  void after_step();
  bool stop_agreed();
  void clear_stop();

  Strategy& strategy_;
  CheckpointManager& manager_;
  TerminationConfig config_;
  std::shared_ptr<std::int64_t> total_run_calls_;  // shared with the checkpoint's entry
  // The loop's last step, from one before_step to the next (its input and its own work included).
  std::optional<std::chrono::steady_clock::time_point> last_step_start_;
  std::chrono::steady_clock::duration last_step_{};
  // When this worker was told to terminate (CLOCK_MONOTONIC ns), 0 until it is; cleared by a save.
  std::int64_t terminated_at_ns_ = 0;
  // This worker's wish to stop, which its votes carry.
  std::unique_ptr<cluster::StopRequest> stop_;
  // Set when there is no termination_watcher_fn.
  std::unique_ptr<SigtermWatch> sigterm_watch_;
};

template <class Fn, class... Args>
auto PreemptionCheckpointHandler::run(Fn&& fn, Args&&... args) {
  before_step(StepCaller::kRun);
  if constexpr (std::is_void_v<decltype(strategy_.run(std::forward<Fn>(fn), std::forward<Args>(args)...))>) {
    strategy_.run(std::forward<Fn>(fn), std::forward<Args>(args)...);
    after_step();
  } else {
    auto result = strategy_.run(std::forward<Fn>(fn), std::forward<Args>(args)...);
    after_step();
    return result;
  }
}

}  // namespace distribute
