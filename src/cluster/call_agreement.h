// distribute::detail: CallAgreement, how the workers (processes) of a multi-worker strategy agree
// on each call before any data moves across them. The thread that takes a collective across the
// workers sends a small header (status, kind, sequence, the digest of the call's signature) to
// every other worker. Only when the headers differ do the workers exchange the rendered
// signatures, from which every worker builds the same error naming the workers, their replicas and
// what differed (call_signature.h). A worker that does not arrive in time makes the workers
// unusable (WorkerGroup, cluster/worker_group.h, whose transport this uses), as a
// collective left half done cannot be taken back.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "base/role.h"
#include "base/wait.h"
#include "cluster/ballot.h"
#include "cluster/stop_request.h"
#include "cluster/worker_group.h"

namespace distribute::cluster {

class CallAgreement {
 public:
  explicit CallAgreement(std::shared_ptr<WorkerGroup> workers);
  // Tells the other workers that this one left: whoever waits for it, or calls a collective
  // later, gets UnavailableError naming it instead of waiting.
  ~CallAgreement();
  CallAgreement(const CallAgreement&) = delete;
  CallAgreement& operator=(const CallAgreement&) = delete;

  WorkerGroup& workers() { return *workers_; }
  const std::shared_ptr<WorkerGroup>& shared_workers() const { return workers_; }

  using Status = Ballot::Status;

  // Agrees with every other worker on this worker's step, `mine` (its timeout bounds the vote).
  // Returns when every worker made the same call (or all returned); otherwise throws, on every
  // worker, the error naming the workers that differ (a failed worker's own error on that worker).
  // DeadlineExceededError when a worker does not arrive within the timeout: this worker then tells
  // the others that it gave up, and a worker that arrives later gets DeadlineExceededError naming
  // the workers that gave up (never a data phase with workers that left it). After either,
  // UnavailableError at once.
  void agree(const Ballot& mine);
  // Whether every worker knows that the innermost current run ended: an agree() in it threw (on
  // every worker alike, also one of a cross-replica step in its merge_fn) or found every worker
  // returned. A run that failed on this worker alone before that must still tell the others (a
  // kFailed agree). Runs nest (a run in a merge_fn), each concluding on its own: begin_run() and
  // end_run() bracket each, on the thread that runs it.
  bool run_concluded() const {
    stepper_.claim_shared();
    return !runs_.empty() && runs_.back();
  }
  void begin_run() {
    stepper_.claim();
    runs_.push_back(false);
  }
  void end_run() {
    stepper_.claim();
    runs_.pop_back();
  }
  // The stop request this worker's votes carry (cluster/stop_request.h), one at a time: false,
  // changing nothing, when another one is carried already. The owner stops it before it goes.
  bool carry_stop_request(const StopRequest& request) {
    const StopRequest* none = nullptr;
    return local_stop_.compare_exchange_strong(none, &request, std::memory_order_acq_rel);
  }
  void stop_carrying_stop_request() { local_stop_.store(nullptr, std::memory_order_release); }
  // Whether a step's headers carried a stop request from any worker: every worker learns it in
  // the same step, so a check between two runs gives the same answer on every worker. Stays true
  // until clear_stop_request().
  bool stop_requested() const { return stop_requested_.load(std::memory_order_acquire); }
  void clear_stop_request() { stop_requested_.store(false, std::memory_order_release); }
  // The number of cross-replica steps (reduce_to, gather_to) so far, counted alike on every worker.
  std::int64_t next_cross_replica_sequence() {
    stepper_.claim();
    return ++cross_replica_sequence_;
  }

 private:
  bool stop_raised_here() const {
    const StopRequest* request = local_stop_.load(std::memory_order_acquire);
    return request != nullptr && request->is_raised();
  }
  // What every worker sends before a step: equal headers (but for their flags) mean equal calls.
  struct Header {
    std::uint32_t status;
    std::uint16_t kind;
    std::uint16_t flags;  // kStopRequested
    std::int64_t sequence;
    std::uint64_t signature;
    bool same_call(const Header& other) const {
      return status == other.status && kind == other.kind && sequence == other.sequence &&
             signature == other.signature;
    }
  };
  static constexpr std::uint16_t kStopRequested = 1;

  WorkerTransport& transport() { return workers_->transport(); }
  std::string this_worker() const { return workers_->workers_text({workers_->worker_id()}); }
  void agree_or_throw(const Ballot& mine);
  // Every worker's description of its call (its rendered signature, or its failure), exchanged
  // when the headers differ.
  std::vector<std::string> exchange_descriptions(const Ballot& mine, detail::Deadline deadline);
  [[noreturn]] void time_out(const Ballot& mine, const std::vector<int>& missing);
  // UnavailableError, leaving the workers unusable, when a worker's header says it left.
  void throw_if_a_worker_left(std::span<const Header> headers, absl::FunctionRef<std::string()> what);
  // The error of `worker`, which failed, from its description (the same on every worker).
  [[noreturn]] void throw_failure_of(int worker, absl::string_view described);

  const std::shared_ptr<WorkerGroup> workers_;
  // Held by whichever thread takes the current step across the workers: the steps of a run are
  // ordered by its rendezvous, nested runs by their merge_fn, a run's end by its runner, and
  // cross-replica steps are taken outside runs or in a merge_fn.
  detail::Role stepper_;
  std::int64_t cross_replica_sequence_ ABSL_GUARDED_BY(stepper_) = 0;
  // Per run in progress, innermost last: whether it concluded.
  std::vector<bool> runs_ ABSL_GUARDED_BY(stepper_);
  // Written by whichever thread takes a step, read by the loop between runs.
  std::atomic<bool> stop_requested_{false};
  std::atomic<const StopRequest*> local_stop_{nullptr};
};

}  // namespace distribute::cluster
