// distribute::cluster::Coordinator: the one way the layers above (the replica layer's collectives,
// the strategy's cross-replica steps, distributed input, checkpoints, preemption, the timeline)
// reach the other workers (processes) of a multi-worker job. It offers the few operations they
// need:
//   - the vote before every step across the workers (agree): the thread that takes the step sends
//     a small header (status, kind, sequence, the digest of the call, a stop-request flag, and the
//     digests of the calls queued behind it) to every other worker; only when the headers differ
//     do the workers exchange their ballots' descriptions, from which every worker builds the same
//     error (ballot.h). Queued calls that every worker offers alike are agreed on in the same
//     vote, and take no vote of their own;
//   - values from the chief (worker 0) to every worker, as bytes or as how its part ended;
//   - reports from every worker to every worker (a distributed iterator's step, the timeline's
//     clocks), on a channel of their own;
//   - the worker set's identity, usability and first failure (WorkerGroup, worker_group.h, whose
//     data steps the hierarchical communicator takes).
// Values cross in one wire format (size, then bytes) and errors in another (wire.h). A worker that
// does not arrive in time makes the workers unusable, as a step left half done cannot be taken
// back.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "base/role.h"
#include "base/wait.h"
#include "cluster/ballot.h"
#include "cluster/stop_request.h"
#include "cluster/worker_group.h"

namespace distribute::cluster {

class Coordinator {
 public:
  // This worker's transport to the others; `num_local_replicas` names replicas in messages.
  Coordinator(std::unique_ptr<WorkerTransport> transport, int num_local_replicas);
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  int num_workers() const { return group_.num_workers(); }
  int worker_id() const { return group_.worker_id(); }
  bool is_chief() const { return worker_id() == 0; }
  int num_local_replicas() const { return group_.num_local_replicas(); }
  // How many workers (this one included) share this worker's machine.
  int workers_on_this_host() const { return group_.workers_on_this_host(); }
  // This worker's host name.
  const std::string& host() const { return group_.hosts()[static_cast<std::size_t>(worker_id())]; }
  // "worker 1 (replicas 2, 3)", "workers 0, 2 on host0, host1 (replicas 0, 1, 4, 5)".
  std::string workers_text(const std::vector<int>& workers) const { return group_.workers_text(workers); }
  bool usable() const { return group_.usable(); }
  // The workers (ids among this one's) that had not come when this worker last gave up waiting in
  // an agreement; empty when it has not. The others had come, so were alive then: an elastic job's
  // survivors tell the next generation whom to wait for (gloo/membership.h).
  std::vector<int> missing_at_timeout() const;
  // UnavailableError, citing the first failure, once the workers are unusable.
  void check_usable() const { group_.check_usable(); }
  // The data steps across the workers, for the hierarchical communicator.
  WorkerGroup& group() { return group_; }

  // Tells the other workers that this one left (its strategy is gone): whoever waits for it, or
  // calls a collective later, gets UnavailableError naming it instead of waiting. Once.
  void leave();

  // The chief's `bytes` on every worker (the argument is ignored elsewhere), in one step of
  // `timeout` named `what`. The workers agree on the step before (a ballot of its own).
  std::string broadcast_from_chief(std::string bytes, std::chrono::duration<double> timeout, const StepName& what);
  // How the chief's part of a step ended, on every worker: null, or its error, which the chief
  // rethrows and every other worker throws as a distribute::Error of the same code naming the
  // chief (an exception of no such code becomes InternalError there).
  void broadcast_outcome_from_chief(std::exception_ptr chief_error, std::chrono::duration<double> timeout,
                                    const StepName& what);

  // Sends `mine` to every worker and receives worker w's (of mine.size() bytes) into
  // all[w * mine.size(), ...), on the reports' channel (a distributed iterator's step, the
  // timeline's clocks): a worker waiting there never takes a vote's header for its own. Returns the
  // workers whose had not come by `deadline`, and then leaves the workers unusable.
  std::vector<int> exchange_reports(std::span<const std::byte> mine, std::span<std::byte> all,
                                    detail::Deadline deadline);
  // The same for reports of any size: worker w's bytes into all[w].
  std::vector<int> exchange_report_bytes(const std::string& mine, std::vector<std::string>& all,
                                         detail::Deadline deadline);

  using Status = Ballot::Status;

  // Agrees with every other worker on this worker's step, `mine` (its timeout bounds the vote).
  // Returns when every worker made the same call (or all returned); otherwise throws, on every
  // worker, the error naming the workers that differ (a failed worker's own error on that worker).
  // DeadlineExceededError when a worker does not arrive within the timeout: this worker then tells
  // the others that it gave up, and a worker that arrives later gets DeadlineExceededError naming
  // the workers that gave up (never a data phase with workers that left it). After either,
  // UnavailableError at once.
  // Returns how many of mine.ahead (at most kMaxAhead are offered) every worker offered alike, the
  // same number on every worker: the steps of those calls are agreed too, and every worker is
  // committed to take them.
  int agree(const Ballot& mine);
  static constexpr std::size_t kMaxAhead = 8;
  // Whether every worker knows that the innermost current run ended: an agree() in it threw (on
  // every worker alike, also one of a cross-replica step in its merge_fn) or found every worker
  // returned. A run that failed on this worker alone before that must still tell the others (a
  // kFailed agree). Runs nest (a run in a merge_fn), each concluding on its own: begin_run() and
  // end_run() bracket each, on the thread that runs it.
  bool run_concluded() const {
    stepper_.assume_shared();
    return !runs_.empty() && runs_.back();
  }
  void begin_run() {
    stepper_.assume_held();
    runs_.push_back(false);
  }
  void end_run() {
    stepper_.assume_held();
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
    stepper_.assume_held();
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
    // The calls queued behind this one that the ballot offers (Ballot::ahead), every field
    // written, so that no byte sent is left unset.
    std::uint64_t ahead_count = 0;
    struct Entry {
      std::uint64_t signature = 0;
      std::uint64_t kind = 0;
    } ahead[kMaxAhead] = {};
    bool same_call(const Header& other) const {
      return status == other.status && kind == other.kind && sequence == other.sequence &&
             signature == other.signature;
    }
  };
  // How many of the calls offered ahead every header offers alike, in order.
  static int agreed_ahead(std::span<const Header> headers, const Header& mine);
  static constexpr std::uint16_t kStopRequested = 1;

  WorkerTransport& transport() { return group_.transport(); }
  // `missing`, the workers whose reports had not come, after the group is made unusable for them.
  std::vector<int> reports_exchanged(std::vector<int> missing);
  std::string this_worker() const { return group_.workers_text({group_.worker_id()}); }
  int agree_or_throw(const Ballot& mine);
  // Every worker's description of its call (its rendered signature, or its failure), exchanged
  // when the headers differ.
  std::vector<std::string> exchange_descriptions(const Ballot& mine, detail::Deadline deadline);
  [[noreturn]] void time_out(const Ballot& mine, const std::vector<int>& missing);
  // UnavailableError, leaving the workers unusable, when a worker's header says it left.
  void throw_if_a_worker_left(std::span<const Header> headers, absl::FunctionRef<std::string()> what);
  // The error of `worker`, which failed, from its description (the same on every worker).
  [[noreturn]] void throw_failure_of(int worker, absl::string_view described);

  WorkerGroup group_;
  std::atomic<bool> left_{false};
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
  mutable detail::Mutex missing_mu_;
  std::vector<int> missing_at_timeout_ ABSL_GUARDED_BY(missing_mu_);
};

}  // namespace distribute::cluster
