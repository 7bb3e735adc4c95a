// CollectiveHandle: a collective in flight, returned at once by ReplicaContext::all_reduce_async,
// reduce_scatter_async and all_gather_async, so that the replica computes while the data moves.
//
//   auto handle = ctx->all_reduce_async(ReduceOp::kSum, grads_of_last_layer);
//   Tensor more = backward_of_earlier_layers(...);   // overlaps the all_reduce
//   std::vector<Tensor> summed = handle.wait();
//
// wait() returns the result as the blocking call would have returned it, or throws the error it
// would have thrown; called again, it gives the same. ready() says without blocking whether
// wait() would return at once. A handle may be dropped unwaited: the collective still runs, and
// a replica that returns with collectives in flight waits for them there (its run fails with
// the error of one that failed unwaited). A handle belongs to the replica and the run that made
// it.
#pragma once

#include <memory>
#include <utility>

#include "distribute/errors.h"
#include "distribute/replica/internal/async_collective.h"

namespace distribute {

template <class V>
class CollectiveHandle {
 public:
  // A handle to nothing: valid() and ready() are false, wait() throws FailedPreconditionError.
  CollectiveHandle() = default;
  explicit CollectiveHandle(std::shared_ptr<detail::AsyncState<V>> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  bool ready() const { return state_ != nullptr && state_->job.ready(); }
  const V& wait() const {
    if (state_ == nullptr) {
      throw FailedPreconditionError("CollectiveHandle::wait: the handle holds no collective (default-constructed)");
    }
    state_->job.wait();
    return *state_->result;
  }

 private:
  std::shared_ptr<detail::AsyncState<V>> state_;
};

}  // namespace distribute
