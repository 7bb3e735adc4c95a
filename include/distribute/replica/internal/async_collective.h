// distribute::detail, not API: one collective issued without waiting (ReplicaContext::*_async).
// The replica's thread makes it (its arguments checked and its buffers held in the state) and
// hands it to the replica's async lane (src/replica/async_lane.h), whose thread runs it as the
// blocking collective would run, in issue order; CollectiveHandle waits on it.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "distribute/replica/internal/collective_call.h"

namespace distribute::detail {

class AsyncCallOrder;
class ReplicaDevice;

class AsyncCollective {
 public:
  AsyncCollective() = default;
  AsyncCollective(const AsyncCollective&) = delete;
  AsyncCollective& operator=(const AsyncCollective&) = delete;

  // What run() does: the collective, storing its result where the handle reads it.
  void set_work(absl::AnyInvocable<void()> work) { work_ = std::move(work); }
  // The call that run() makes, which the work owns: while the job waits on its lane, the group
  // reads it to agree with the other workers on the step ahead of its turn. Unset (null), the job
  // is agreed on only when it runs.
  void set_call(const CollectiveCall* call) { call_ = call; }
  // Valid until run() begins.
  const CollectiveCall* call() const { return call_; }
  // Orders the work on `device` (a GPU's communication stream; ReplicaDevice::issue_async_call).
  // Its buffers are then kept until forget_device_order(), after which the replica's stream has
  // waited for the work.
  void set_device_order(ReplicaDevice* device, std::shared_ptr<AsyncCallOrder> order);
  // On the replica's thread once its stream has waited for every job of its lane: drops the
  // order and the work's buffers.
  void forget_device_order();
  // On the lane: runs the work once and records how it ended, then drops it (unless ordered on a
  // device). Never throws.
  void run() noexcept;

  bool ready() const { return done_.load(std::memory_order_acquire); }
  // Blocks until run() has finished; rethrows the collective's error. Ordered on a device, the
  // replica's later work then waits for the collective's.
  void wait();
  // The error of a collective that finished without anyone waiting for it, or null.
  std::exception_ptr unobserved_error() const {
    return ready() && !observed_.load(std::memory_order_acquire) ? error_ : nullptr;
  }

 private:
  absl::AnyInvocable<void()> work_;
  ReplicaDevice* device_ = nullptr;
  std::shared_ptr<AsyncCallOrder> order_;
  const CollectiveCall* call_ = nullptr;
  std::exception_ptr error_;  // written before done_ is set
  std::atomic<std::uint32_t> done_{0};
  std::atomic<bool> observed_{false};
};

// A collective issued without waiting for its result of type V: the issued value (whose leaves
// it reads), the job, and the result.
template <class V>
struct AsyncState {
  explicit AsyncState(const V& v) : value(v) {}
  V value;
  AsyncCollective job;
  std::optional<V> result;
  // A copy of what the collective was issued for (ScopedCallPurpose), which the lane reads after
  // the issuer's scope has ended.
  std::vector<VariableKey> purpose_keys;
  std::optional<CallPurpose> purpose;
};

}  // namespace distribute::detail
