// Elastic training: a MultiWorkerMirroredStrategy whose workers may change while it trains
// (ElasticOptions, over Gloo). The loop runs inside run_elastic and calls ElasticState::commit()
// at each step boundary. When a worker fails or stops answering, the collective that waited for
// it throws on the others; run_elastic catches that, the survivors form the next generation
// through the rendezvous store, take the state of the last committed step from one of them, and
// call the loop again, which goes on from the committed progress. A worker started later is let
// in at a commit() the same way. No process restarts and no checkpoint is read.
//
//   MultiWorkerMirroredStrategyOptions options;
//   options.elastic.min_workers = 2;
//   MultiWorkerMirroredStrategy strategy(options);
//   ... model and optimizer under strategy.scope() ...
//   ElasticState state(strategy, Checkpoint({{"w", w}}, optimizer.checkpoint_state()));
//   run_elastic(strategy, state, [&] {
//     for (; state.progress.step < steps; ) {
//       ... a distributed dataset made here, from state.progress.input_position ...
//       strategy.run(step_fn, batch);
//       ++state.progress.step;
//       state.commit();
//     }
//   });
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <vector>

#include "distribute/checkpoint/checkpoint.h"
#include "distribute/device/tensor.h"
#include "distribute/strategy/multi_worker_mirrored_strategy.h"

namespace distribute {

// Where the loop is, kept and restored with the state. The loop sets it before commit(); after a
// change of membership, run_elastic calls the loop again with the committed progress.
struct ElasticProgress {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t input_position = 0;  // e.g. the samples consumed so far
};

// What commit() throws when workers wait to join: run_elastic catches it, lets them in and calls
// the loop again. Not a distribute::Error, so that a loop that handles those lets it through.
class MembershipChangeInterrupt : public std::exception {
 public:
  const char* what() const noexcept override {
    return "workers wait to join the elastic job (run_elastic lets them in and calls the loop again)";
  }
};

class ElasticState {
 public:
  // `checkpoint` names what a step changes: the variables, the optimizer's checkpoint_state(),
  // counters kept in variables. With `save_path`, the state of the last commit is saved there (the
  // chief writes it) when the job ends for fewer than ElasticOptions::min_workers, or because the
  // rendezvous store failed. InvalidArgumentError unless the
  // strategy is elastic and the checkpoint's variables are its own.
  ElasticState(MultiWorkerMirroredStrategy& strategy, Checkpoint checkpoint, std::filesystem::path save_path = {});

  // Set by the loop; restored to the committed progress by run_elastic.
  ElasticProgress progress;

  // At a step boundary, in cross-replica context, on every worker (collective): keeps a copy of the
  // state and `progress`, which a failure rolls back to. Then, if a worker waits to join and the
  // job has room, throws MembershipChangeInterrupt (after the copy: nothing is lost).
  void commit();
  // The progress of the last commit() (before any, the progress at run_elastic's start).
  const ElasticProgress& committed() const { return committed_; }
  // Commits so far on this worker, restored ones included.
  std::int64_t commits() const { return commits_; }

 private:
  friend void run_elastic(MultiWorkerMirroredStrategy& strategy, ElasticState& state,
                          const std::function<void()>& train);
  // Keeps a copy of the state and progress.
  void keep();
  // Every worker of the current generation takes the committed state of the one that committed
  // last (the lowest such worker), and its progress.
  void synchronize();
  // The kept state, written back and saved to save_path (collective): the part of the message
  // saying where, or that there is no save_path.
  std::string save_kept();

  MultiWorkerMirroredStrategy& strategy_;
  Checkpoint checkpoint_;
  std::filesystem::path save_path_;
  std::vector<Tensor> kept_;
  ElasticProgress committed_;
  std::int64_t commits_ = 0;
  bool kept_any_ = false;
  bool store_failed_ = false;  // the rendezvous store failed at a commit, every worker still there
};

// Runs `train` until it returns, across changes of the workers: after a collective failed because
// a worker is gone (the strategy's generation unusable), or after commit() found workers waiting,
// the workers form the next generation, synchronise the state (ElasticState) and `train` is called
// again with `state.progress` at the committed step. Any other exception from `train` propagates,
// as do the errors of forming a generation (DeadlineExceededError when its workers do not meet in
// time). Below ElasticOptions::min_workers, and when the rendezvous store fails at a commit (no
// change could be agreed any more), the committed state is saved (ElasticState's save_path) and
// UnavailableError is thrown on every worker. In cross-replica context of the strategy, on every worker.
void run_elastic(MultiWorkerMirroredStrategy& strategy, ElasticState& state, const std::function<void()>& train);

}  // namespace distribute
