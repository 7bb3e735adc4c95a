// distribute::detail: the steps across workers that the layers above the strategy take (variables,
// checkpoints, preemption), in terms of a strategy: each agrees with the other workers on the step
// (a ballot like a collective's, so workers that differ all get the same error) and then goes
// through the strategy's cluster::Coordinator. With one worker, each is this worker's part alone.
#pragma once

#include <chrono>
#include <exception>
#include <string>

#include "base/mutex.h"
#include "cluster/coordinator.h"
#include "distribute/collective/internal/collective_op.h"
#include "distribute/device/tensor.h"
#include "distribute/strategy/strategy_extended.h"

namespace distribute::detail {

struct CallPurpose;  // distribute/replica/internal/collective_call.h

// Agrees with the other workers on a cross-replica step of `coordinator`'s: `kind` (kReduceTo,
// kGatherTo, kBroadcastTo) of one leaf, `value`'s dtype and shape, which may differ between workers
// along `open_axis` (-1: none). A local check that failed (`error`) is reported to every worker,
// and rethrown here.
void agree_on_cross_replica_step(cluster::Coordinator& coordinator, collective::CollectiveKind kind, ReduceOp op,
                                 int open_axis, const Tensor& value, std::chrono::duration<double> timeout,
                                 std::exception_ptr error);

// The chief's (worker 0's) `mine` on every worker, bit for bit, in cross-replica context: what a
// variable's ONLY_FIRST_REPLICA and NONE updates apply, and the values a checkpoint read.
Tensor broadcast_from_chief(StrategyExtended& extended, const Tensor& mine);
// The chief's `bytes` on every worker (the argument is ignored elsewhere).
std::string broadcast_from_chief(StrategyExtended& extended, std::string bytes);
// How the chief's part of an operation ended, on every worker: the chief rethrows its `error`,
// and every other worker throws a distribute::Error of the same code naming the chief (another
// exception becomes InternalError there). Returns when the chief's part succeeded.
void broadcast_outcome_from_chief(StrategyExtended& extended, std::exception_ptr error);

// Agrees with the other workers, before anything is read, written or sent, that every worker makes
// the checkpoint operation that `purpose` names (its method and entries): workers whose operations
// differ all throw the same error naming them, as for collectives that differ.
void agree_on_checkpoint(StrategyExtended& extended, const CallPurpose& purpose);

// Keeps a strategy between two steps for its lifetime: waits for a run in progress on another
// thread to end and keeps the next from starting, so that what a checkpoint reads or writes is
// one step's state, never parts of two. Inside a merge_fn of the strategy it holds nothing: the
// run's own thread holds the strategy, and every replica waits in merge_call.
class BetweenRuns {
 public:
  explicit BetweenRuns(StrategyExtended& extended);
  ~BetweenRuns();
  BetweenRuns(const BetweenRuns&) = delete;
  BetweenRuns& operator=(const BetweenRuns&) = delete;

 private:
  Mutex* held_ = nullptr;
};

}  // namespace distribute::detail
