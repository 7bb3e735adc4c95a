// distribute::detail: ReplicaGroup, the replicas of one run, synchronised. Every collective and
// merge_call goes through here: each replica publishes its CollectiveCall, the rendezvous's last
// arriver compares the calls' signatures (call_signature.h) and, for merge_call, runs merge_fn
// once; then the backend Communicator moves the data. Where the backend's replicas share host
// memory, an all_reduce or reduce_scatter of a few bytes skips the rendezvous: it is done in one
// cache-line transfer per peer (small_all_reduce.h), and only a mismatch takes the rendezvous, to
// name what differed.
// The group also records the run's first failure and releases every waiting replica when one
// fails, times out or leaves early, so no replica is left hanging.
//
// In a multi-worker strategy the group's Communicator is the hierarchical one, which moves the data
// across the workers, and the group calls the workers' cluster::Coordinator as it completes each phase:
// the workers agree on the call before any data moves, and a run's end or failure is agreed too.
// A vote also offers the async calls queued on the replicas' lanes behind its call: those the
// workers agree on take their steps without a vote, and a replica's failure releases the others
// only once those steps, to which every worker is committed, are taken.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "base/role.h"
#include "base/timeline.h"
#include "collective/communicator.h"
#include "collective/rendezvous.h"
#include "distribute/replica/internal/collective_call.h"
#include "distribute/replica/collective_stats.h"
#include "cluster/coordinator.h"
#include "device/replica_device.h"
#include "replica/async_lane.h"
#include "replica/small_all_reduce.h"

namespace distribute::detail {

class ReplicaGroup {
 public:
  // In a multi-worker strategy, `agreement` is the workers' and this group's replicas have the
  // global ids first_id ...; null for a single process. devices[r], where given, is replica r's
  // device, which orders the collectives of its async lane (a GPU's communication stream).
  ReplicaGroup(int size, std::unique_ptr<collective::Communicator> communicator, WaitPolicy policy,
               CommunicationOptions defaults, cluster::Coordinator* agreement = nullptr, int first_id = 0,
               std::vector<ReplicaDevice*> devices = {});

  int size() const { return size_; }

  // After a run, on the caller's thread: a run that failed here before the workers learnt of it
  // tells them now, so that no worker waits for this one's next collective.
  void finish_run();
  const CommunicationOptions& default_options() const { return defaults_; }

  // Before a run, with no replica inside: clears the previous run's failure and lets the backend
  // rebuild what a failure broke.
  void prepare_run();
  // On replica `rank`'s thread as its part of a run begins, in every run: clears its sequence
  // numbers and makes its small-path lines of earlier runs stale. (Its own lines, so the caller's
  // prepare_run() does not pull them away from the replicas' cores every run.)
  void begin_replica(int rank);

  // Called by replica `rank` with its part of a collective; see Communicator for the outputs.
  // Throws the mismatch error when the replicas' calls differ, DeadlineExceededError when the
  // options' timeout passes first, and the release error when another replica failed.
  void all_reduce(int rank, CollectiveCall& call);
  void all_gather(int rank, CollectiveCall& call);
  void reduce_scatter(int rank, CollectiveCall& call);
  // Runs calls[0]'s run_merge once for all replicas and returns its result to each.
  std::shared_ptr<void> merge_call(int rank, CollectiveCall& call);
  // Replica `rank`'s function returned. Does not wait for the other replicas: a replica still in
  // a collective, or one arriving at a collective later, sees the difference and fails with an
  // error naming `rank`. It does wait for rank's async lane, and throws the error of a collective
  // there that failed with nobody waiting for it.
  void replica_returned(int rank);

  // Runs `job` on replica `rank`'s async lane (made at its first job), after the collectives
  // issued before it. Called by rank's own thread.
  void issue_async(int rank, std::shared_ptr<AsyncCollective> job);
  // Returns once rank's async lane has run every job it holds: after a failure, before the
  // replica's part of the run ends.
  void drain_async(int rank);

  // Replica `rank` failed with `error`: it becomes the run's error if it is the first, and every
  // replica waiting now or later is released with an AbortedError naming `rank`.
  void fail(int rank, std::exception_ptr error);
  // The run's first error, or null.
  std::exception_ptr first_error() const;
  // Whether the run has failed (cheap: for polling loops).
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  collective::Communicator& communicator() { return *communicator_; }

  // Replica `rank`'s straggler figures (StrategyExtended::collective_stats), and their reset.
  // Between runs; during one they are a moment's reading.
  ReplicaCollectiveStats stats(int rank) const;
  // The time the collectives spent in their steps across the workers (0 in one process).
  double cross_process_seconds() const;
  // The bytes they carried across the workers, as on the wire.
  std::int64_t cross_process_bytes() const { return cross_process_total_bytes_.load(std::memory_order_relaxed); }
  // The workers' votes this group took before its steps across the workers.
  std::int64_t cross_process_votes() const { return votes_.load(std::memory_order_relaxed); }
  void reset_stats();

 private:
  // A backend's data phase (Communicator::all_reduce, all_gather or reduce_scatter).
  using DataPhase = void (collective::Communicator::*)(int rank, std::span<collective::CollectiveOp* const> ops);
  // Replica `rank`'s collective of `kind`: its rendezvous, then `data_phase` unless the small path
  // completed it.
  void run_collective(int rank, CollectiveCall& call, collective::CollectiveKind kind, DataPhase data_phase);
  // Before rank's blocking collective, merge_call or return: the async collectives it issued
  // first are run first (unless this is the lane's own thread, running one of them).
  void finish_async_before(int rank);
  // Waits until rank's async lane has run every job it holds, then orders the replica's later
  // device work after theirs.
  void drain_lane(int rank, AsyncLane& lane);
  // Publishes `call`, then meets the other replicas at the rendezvous (unless the small path
  // completed it); returns whether the data phase is still to do.
  bool synchronise(int rank, CollectiveCall& call);
  // Publishes `call` as rank's part of the next phase; `small` says whether it went on the small
  // path.
  void publish(int rank, CollectiveCall& call, bool& small);
  // The timeline track of replica `rank`'s collectives on this thread: the replica's, or on its
  // async lane the lane's.
  int track(int rank) const;
  // What the timeline events of `call`, numbered `sequence`, carry; only while a timeline records.
  timeline::Args timeline_args(const CollectiveCall& call, std::int64_t sequence) const;
  // Replica `rank`'s args of `call`, before publish() numbers it.
  timeline::Args replica_args(int rank, const CollectiveCall& call) const;
  [[noreturn]] void time_out(int rank, const CollectiveCall& call, std::vector<int> behind);
  // Records the run's failure and releases every replica with `release`. With `spare_agreed`
  // (a replica's own failure), the release waits while steps the workers agreed on ahead are still
  // to take: every worker is committed to them, and this one takes them (its replicas' lanes run
  // them) before the release comes.
  void record_failure(std::exception_ptr root, std::exception_ptr release, bool spare_agreed = false);
  void release_now(std::exception_ptr release);
  // Checks and settles `call`'s options as publish() does (merged with the defaults); throws what
  // publish() would.
  void settle_options(CollectiveCall& call) const;
  void complete_phase() ABSL_EXCLUSIVE_LOCKS_REQUIRED(phase_);
  // complete_phase's work, but for the bookkeeping of the steps agreed ahead.
  void run_phase() ABSL_EXCLUSIVE_LOCKS_REQUIRED(phase_);
  // The calls queued on every replica's lane behind the current phase, alike on every replica and
  // fit to be agreed ahead, into ahead_. Every replica has a lane, and none may be released from
  // this phase meanwhile.
  void collect_ahead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(phase_);
  // Whether the workers agreed on the step of call `sequence` in an earlier vote.
  bool agreed_already(std::int64_t sequence) const;
  // complete_phase's agreement with the other workers; records the failure and returns false when
  // the workers' calls differ or one of them failed.
  bool agree_across_workers(std::exception_ptr local_mismatch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(phase_);

  // Counts a collective of replica `rank`, which waited from `waited_from` (cycle_now() ticks),
  // or, when that is 0, found every other replica there (arrived last).
  void count_collective(int rank, std::int64_t waited_from);

  struct alignas(64) Slot {
    CollectiveCall* call = nullptr;
    std::int64_t sequence = 0;
    CollectiveCall returned;  // outlives replica_returned(), which does not wait for the phase
    // The straggler figures: written by the replica's own thread (a load and a store, no
    // read-modify-write), read and reset by the caller's between runs.
    std::atomic<std::int64_t> collectives{0};
    std::atomic<std::int64_t> last_arrivals{0};
    std::atomic<std::int64_t> wait_ticks{0};  // of cycle_now()
    // The replica's async lane, made by its thread at its first async collective; null before.
    std::unique_ptr<AsyncLane> lane;
    // Whether the replica issued async collectives since its device last waited for its lane's
    // (ReplicaDevice::join_async_calls); the replica's thread's alone.
    bool unjoined = false;
  };

  const int size_;
  const CommunicationOptions defaults_;
  const WaitPolicy policy_;
  std::unique_ptr<collective::Communicator> communicator_;
  collective::Rendezvous rendezvous_;
  std::unique_ptr<SmallAllReduce> small_;  // null where the backend's replicas do not share memory
  std::vector<Slot> slots_;
  // Held alone by the completer of a phase (and by prepare_run, with no replica inside), shared by
  // every replica after its release until it arrives at the next phase.
  Role phase_;
  std::vector<CollectiveCall*> calls_ ABSL_GUARDED_BY(phase_);
  std::vector<collective::CollectiveOp*> ops_ ABSL_GUARDED_BY(phase_);  // the calls' buffers, for the backend
  std::shared_ptr<void> merge_result_ ABSL_GUARDED_BY(phase_);
  // The current phase's step across the workers (cycle_now() ticks; 0 in one process), which the
  // released replicas take out of their waiting time, and the sum over every phase.
  std::int64_t cross_process_ticks_ ABSL_GUARDED_BY(phase_) = 0;
  std::atomic<std::int64_t> cross_process_total_ticks_{0};
  std::atomic<std::int64_t> cross_process_total_bytes_{0};
  std::atomic<std::int64_t> votes_{0};
  // The calls queued behind the current phase that its vote offers the workers, and the lanes'
  // jobs they were read from (per replica).
  std::vector<cluster::Ballot::Ahead> ahead_ ABSL_GUARDED_BY(phase_);
  std::vector<std::vector<std::shared_ptr<AsyncCollective>>> queued_ ABSL_GUARDED_BY(phase_);
  // What finish_run reports to the workers: the end of a run that failed here.
  CollectiveCall failure_report_;
  cluster::Coordinator* const agreement_;
  const int first_id_;
  const std::vector<ReplicaDevice*> devices_;
  mutable Mutex mu_;
  std::exception_ptr first_error_ ABSL_GUARDED_BY(mu_);
  int first_error_rank_ ABSL_GUARDED_BY(mu_) = -1;  // the replica that raised it, if one did
  // The steps agreed ahead (multi-worker): the last call sequence the workers agreed on, the last
  // whose phase completed, whether a vote that may agree on more is under way, and a replica's
  // release held back until the agreed steps are taken (record_failure).
  std::int64_t agreed_through_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t completed_through_ ABSL_GUARDED_BY(mu_) = 0;
  bool voting_ahead_ ABSL_GUARDED_BY(mu_) = false;
  std::exception_ptr held_release_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> failed_{false};
};

}  // namespace distribute::detail
