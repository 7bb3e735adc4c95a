// ReplicaGroup: publishing calls, comparing them at the rendezvous, running merge_fn, failing a run.
#include "replica/replica_group.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/cycle_clock.h"
#include "base/timeline.h"
#include "device/gpu_runtime.h"
#include "distribute/errors.h"
#include "replica/call_signature.h"

namespace distribute::detail {

using collective::CollectiveKind;

namespace {

// Set on the threads of the async lanes, which run collectives a replica issued earlier.
thread_local bool on_async_lane = false;

}  // namespace

ReplicaGroup::ReplicaGroup(int size, std::unique_ptr<collective::Communicator> communicator, WaitPolicy policy,
                           CommunicationOptions defaults, cluster::Coordinator* agreement, int first_id,
                           std::vector<ReplicaDevice*> devices)
    : size_(size),
      defaults_(defaults),
      policy_(policy),
      communicator_(std::move(communicator)),
      rendezvous_(size, policy),
      small_(communicator_->shares_host_memory() && size > 1 ? std::make_unique<SmallAllReduce>(size) : nullptr),
      slots_(static_cast<std::size_t>(size)),
      calls_(static_cast<std::size_t>(size)),
      ops_(static_cast<std::size_t>(size)),
      agreement_(agreement),
      first_id_(first_id),
      devices_(std::move(devices)) {
  communicator_->set_failure_flag(&failed_);
  for (Slot& slot : slots_) {
    slot.returned.op.kind = CollectiveKind::kReturn;
    slot.returned.op.options = slot.returned.op.options.merged_with(defaults_);
    slot.returned.signature = signature_digest(slot.returned);
  }
  failure_report_.op.kind = CollectiveKind::kReturn;
  failure_report_.op.options = failure_report_.op.options.merged_with(defaults_);
}

void ReplicaGroup::prepare_run() {
  if (agreement_ != nullptr) agreement_->begin_run();
  // After a run that succeeded every replica arrived at every phase and nobody is left inside: the
  // rendezvous is as reset already, and writing its lines would only make the replicas fetch them
  // again. Lines are written here only where a run left something behind.
  if (failed()) {
    rendezvous_.reset();
    MutexLock lock(mu_);
    first_error_ = nullptr;
    first_error_rank_ = -1;
    failed_.store(false, std::memory_order_release);
  }
  if (agreement_ != nullptr) {
    // Every phase of the last run completed or was abandoned with it: sequences begin again.
    MutexLock lock(mu_);
    agreed_through_ = 0;
    completed_through_ = 0;
    voting_ahead_ = false;
    held_release_ = nullptr;
  }
  phase_.assume_held();
  if (merge_result_) merge_result_.reset();
  communicator_->begin_run();
}

void ReplicaGroup::begin_replica(int rank) {
  Slot& slot = slots_[static_cast<std::size_t>(rank)];
  slot.call = nullptr;
  slot.sequence = 0;
  if (small_) small_->begin(rank);
}

void ReplicaGroup::complete_phase() {
  for (std::size_t r = 0; r < slots_.size(); ++r) {
    calls_[r] = slots_[r].call;
    ops_[r] = &calls_[r]->op;
  }
  const std::int64_t sequence = calls_[0]->op.sequence;
  run_phase();
  if (agreement_ == nullptr) return;
  // A replica's release held back for the steps agreed ahead goes once the last of them is taken.
  std::exception_ptr release;
  {
    MutexLock lock(mu_);
    completed_through_ = sequence;
    if (held_release_ && completed_through_ >= agreed_through_) release = std::exchange(held_release_, nullptr);
  }
  if (release) release_now(std::move(release));
}

bool ReplicaGroup::agreed_already(std::int64_t sequence) const {
  MutexLock lock(mu_);
  return sequence <= agreed_through_;
}

void ReplicaGroup::run_phase() {
  std::exception_ptr mismatch = compare_calls(calls_, first_id_);
  // A multi-worker step on the timeline's cross-worker track: the workers' vote on the call, then
  // the backend's cross-process phase (the local combination and the data step across workers).
  // A call the workers agreed on in an earlier vote (queued behind that vote's call) takes no vote:
  // its replicas' calls were compared then.
  std::optional<timeline::Span> across;
  if (agreement_ != nullptr) {
    const CollectiveCall& first = *calls_[0];
    across.emplace(timeline::kCrossWorkerTrack, collective::kind_name(first.op.kind),
                   [&] { return timeline_args(first, first.op.sequence); });
    if (!agreed_already(first.op.sequence)) {
      timeline::Span vote(timeline::kCrossWorkerTrack, "vote");
      if (!agree_across_workers(mismatch)) return;
    } else if (mismatch) {
      record_failure(mismatch, mismatch);
      return;
    }
  } else if (mismatch) {
    record_failure(mismatch, mismatch);
    return;
  }
  // A backend's staged path is taken only if every replica staged; each replica then reads only
  // its own call's flag, since the others' calls may be gone once the phase is released.
  const bool staged = std::all_of(ops_.begin(), ops_.end(), [](const collective::CollectiveOp* op) { return op->staged; });
  // Written only where it changes: a store would take the line of the call (on its replica's
  // stack) away from the replica that reads it right after the release.
  for (collective::CollectiveOp* op : ops_) {
    if (op->staged != staged) op->staged = staged;
  }
  try {
    if (agreement_ != nullptr) {
      // The step across the workers, timed apart from the replicas' waiting for each other.
      const std::int64_t from = cycle_now();
      const std::int64_t bytes = communicator_->cross_process_phase(ops_);
      cross_process_ticks_ = cycle_now() - from;
      cross_process_total_ticks_.store(cross_process_total_ticks_.load(std::memory_order_relaxed) + cross_process_ticks_,
                                       std::memory_order_relaxed);
      cross_process_total_bytes_.store(cross_process_total_bytes_.load(std::memory_order_relaxed) + bytes,
                                       std::memory_order_relaxed);
    }
    communicator_->prepare(ops_);
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    record_failure(error, error);
    return;
  }
  if (calls_[0]->op.kind == CollectiveKind::kMergeCall) {
    try {
      merge_result_ = calls_[0]->run_merge(calls_);
      // merge_fn's device work is on this thread's stream; the replicas use it on theirs.
      gpu::synchronize_bound_stream();
    } catch (...) {
      std::exception_ptr error = std::current_exception();
      record_failure(error, std::make_exception_ptr(AbortedError(absl::StrCat(
                                "merge_fn of ", call_name(*calls_[0]), " raised: ", describe_exception(error)))));
    }
  }
}

bool ReplicaGroup::agree_across_workers(std::exception_ptr local_mismatch) {
  const CollectiveCall& first = *calls_[0];
  using Status = cluster::Ballot::Status;
  const Status status = local_mismatch                               ? Status::kFailed
                        : first.op.kind == CollectiveKind::kReturn ? Status::kReturned
                                                                   : Status::kCall;
  CallBallot ballot(status, first, local_mismatch);
  ahead_.clear();
  const bool lanes = std::all_of(slots_.begin(), slots_.end(), [](const Slot& slot) { return slot.lane != nullptr; });
  if (status == Status::kCall && lanes) {
    // From here until the vote's outcome is known, a replica that fails holds its release back:
    // the lanes stay in this phase, so the jobs read below do not begin, and the calls offered
    // may become steps every worker is committed to. After a failure already recorded, nothing
    // is offered.
    bool offer = false;
    {
      MutexLock lock(mu_);
      offer = !first_error_;
      voting_ahead_ = offer;
    }
    if (offer) collect_ahead();
  }
  ballot.ahead = ahead_;
  int agreed = 0;
  std::exception_ptr error;
  try {
    agreed = agreement_->agree(ballot);
  } catch (...) {
    error = std::current_exception();
  }
  votes_.store(votes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  {
    MutexLock lock(mu_);
    voting_ahead_ = false;
    if (!error) agreed_through_ = first.op.sequence + agreed;
  }
  if (error) {
    record_failure(error, error);
    return false;
  }
  return true;
}

void ReplicaGroup::collect_ahead() {
  queued_.resize(slots_.size());
  std::size_t common = cluster::Coordinator::kMaxAhead;
  for (std::size_t r = 0; r < slots_.size() && common > 0; ++r) {
    slots_[r].lane->queued(common, queued_[r]);
    common = std::min(common, queued_[r].size());
  }
  // Every replica is in this phase, so none of these jobs has begun: their calls are as issued.
  for (std::size_t j = 0; j < common; ++j) {
    cluster::Ballot::Ahead call_ahead;
    bool alike = true;
    for (std::size_t r = 0; r < slots_.size() && alike; ++r) {
      const CollectiveCall* queued = queued_[r][j]->call();
      if (queued == nullptr) {
        alike = false;
        break;
      }
      // Only a call that publish() will take is offered: one it throws for never reaches its step.
      CollectiveCall settled = *queued;
      try {
        settle_options(settled);
      } catch (...) {
        alike = false;
        break;
      }
      const cluster::Ballot::Ahead mine{signature_digest(settled), static_cast<std::uint16_t>(settled.op.kind)};
      if (r == 0) {
        call_ahead = mine;
      } else if (!(mine == call_ahead)) {
        alike = false;  // the replicas' calls differ: compared, and named, when it runs
      }
    }
    if (!alike) break;
    ahead_.push_back(call_ahead);
  }
  for (auto& jobs : queued_) jobs.clear();
}

void ReplicaGroup::finish_run() {
  if (agreement_ == nullptr) return;
  const bool concluded = agreement_->run_concluded();
  agreement_->end_run();
  if (concluded) return;
  std::exception_ptr error;
  int failed_replica = -1;
  {
    MutexLock lock(mu_);
    error = first_error_;
    if (first_error_rank_ >= 0) failed_replica = first_id_ + first_error_rank_;
  }
  if (!error) return;
  try {
    agreement_->agree(CallBallot(cluster::Ballot::Status::kFailed, failure_report_, error, failed_replica));
  } catch (...) {
    // The workers now know; this worker's run keeps its own error.
  }
}

void ReplicaGroup::publish(int rank, CollectiveCall& call, bool& small) {
  Slot& slot = slots_[static_cast<std::size_t>(rank)];
  call.op.sequence = ++slot.sequence;
  settle_options(call);
  call.signature = signature_digest(call);
  slot.call = &call;
  small = small_ && small_->post(rank, call);
  if (!small) communicator_->stage(rank, call.op);
}

void ReplicaGroup::settle_options(CollectiveCall& call) const {
  const bool reduces = call.op.kind == CollectiveKind::kAllReduce || call.op.kind == CollectiveKind::kReduceScatter;
  if (call.op.options.compression != Compression::kNone && !reduces) [[unlikely]] {
    throw InvalidArgumentError(absl::StrCat(call_name(call), ": CommunicationOptions::compression is ",
                                            compression_name(call.op.options.compression),
                                            " but only all_reduce and reduce_scatter compress (the others move values "
                                            "unchanged); pass Compression::kNone"));
  }
  call.op.options = call.op.options.merged_with(defaults_);
  const CommunicationImplementation wanted = call.op.options.implementation;
  if (wanted != CommunicationImplementation::kAuto && wanted != communicator_->implementation()) [[unlikely]] {
    throw InvalidArgumentError(absl::StrCat(
        call_name(call), ": CommunicationOptions::implementation is ", implementation_name(wanted),
        " but this strategy's collectives go through ", std::string(communicator_->name()),
        "; pass kAuto, or choose the backend when building the strategy"));
  }
}

bool ReplicaGroup::synchronise(int rank, CollectiveCall& call) {
  bool small = false;
  publish(rank, call, small);
  // When this replica began to wait, in cycle_now() ticks; it stays 0 for the replica that finds
  // every other one there (the rendezvous's completer, or the small path's replica whose peers'
  // lines had all come), so that the last to arrive reads no clock.
  std::int64_t waited_from = 0;
  bool completer = false;
  // Runs once, on the path that waits first.
  const auto meanwhile = [&] {
    if (!completer && waited_from == 0) waited_from = cycle_now();
    if (!call.while_waiting) return;
    (*call.while_waiting)();
    call.while_waiting.reset();
  };
  if (small) {
    switch (small_->complete(rank, call, call.op.options.timeout, policy_, [this] { return failed(); }, meanwhile)) {
      case SmallAllReduce::Outcome::kDone:
        count_collective(rank, waited_from);
        return false;
      case SmallAllReduce::Outcome::kTimedOut: time_out(rank, call, small_->behind(rank, call.op.sequence));
      // A mismatch is named by the rendezvous's comparison; after a failure the rendezvous throws
      // the run's release error.
      case SmallAllReduce::Outcome::kMismatch:
      case SmallAllReduce::Outcome::kCancelled: break;
    }
  }
  if (rendezvous_.arrive_and_wait(rank, deadline_after(call.op.options.timeout), [&] {
        completer = waited_from == 0;
        phase_.assume_held();
        complete_phase();
      }, meanwhile) !=
      collective::Rendezvous::Outcome::kCompleted) {
    time_out(rank, call, rendezvous_.behind(rank));
  }
  count_collective(rank, waited_from);
  return true;
}

void ReplicaGroup::count_collective(int rank, std::int64_t waited_from) {
  Slot& slot = slots_[static_cast<std::size_t>(rank)];
  const auto add = [](std::atomic<std::int64_t>& counter, std::int64_t n) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  };
  add(slot.collectives, 1);
  if (waited_from == 0) {
    add(slot.last_arrivals, 1);
  } else {
    // The phase's step across the workers is moving data, not waiting: CollectiveStats counts it
    // apart. Read after the release, before this replica arrives at the next phase.
    phase_.assume_shared();
    add(slot.wait_ticks, std::max<std::int64_t>(0, cycle_now() - waited_from - cross_process_ticks_));
  }
}

double ReplicaGroup::cross_process_seconds() const {
  return static_cast<double>(cross_process_total_ticks_.load(std::memory_order_relaxed)) / cycle_ticks_per_second();
}

ReplicaCollectiveStats ReplicaGroup::stats(int rank) const {
  const Slot& slot = slots_[static_cast<std::size_t>(rank)];
  return ReplicaCollectiveStats{
      .replica_id = first_id_ + rank,
      .collectives = slot.collectives.load(std::memory_order_relaxed),
      .last_arrivals = slot.last_arrivals.load(std::memory_order_relaxed),
      .wait_seconds = static_cast<double>(slot.wait_ticks.load(std::memory_order_relaxed)) / cycle_ticks_per_second()};
}

void ReplicaGroup::reset_stats() {
  for (Slot& slot : slots_) {
    for (std::atomic<std::int64_t>* counter : {&slot.collectives, &slot.last_arrivals, &slot.wait_ticks}) {
      counter->store(0, std::memory_order_relaxed);
    }
  }
  cross_process_total_ticks_.store(0, std::memory_order_relaxed);
  cross_process_total_bytes_.store(0, std::memory_order_relaxed);
  votes_.store(0, std::memory_order_relaxed);
}

void ReplicaGroup::time_out(int rank, const CollectiveCall& call, std::vector<int> behind) {
  for (int& r : behind) r += first_id_;
  auto error = std::make_exception_ptr(DeadlineExceededError(absl::StrCat(
      "timed out after ", call.op.options.timeout.count(), " s: ", collective::replicas_text(behind),
      " did not arrive while replica ", first_id_ + rank, " waits in ", call_name(call),
      "; a replica is stuck or skipped the collective (raise CommunicationOptions::timeout if it is slow)")));
  record_failure(error, error);
  std::rethrow_exception(error);
}

timeline::Args ReplicaGroup::timeline_args(const CollectiveCall& call, std::int64_t sequence) const {
  std::int64_t bytes = 0;
  for (const collective::BufferRef& input : call.op.inputs) bytes += static_cast<std::int64_t>(input.nbytes());
  return timeline::Args{.kind = collective::kind_name(call.op.kind),
                        .sequence = sequence,
                        .bytes = bytes,
                        .backend = communicator_->name()};
}

timeline::Args ReplicaGroup::replica_args(int rank, const CollectiveCall& call) const {
  // publish() numbers the call as the wait begins: this is the number it is about to get.
  return timeline_args(call, slots_[static_cast<std::size_t>(rank)].sequence + 1);
}

// On the timeline each collective is a span of its kind, with the call's args, holding a "wait"
// span (the rendezvous, from this replica's arrival until the phase completes) and a "data" span
// (the backend). A small all_reduce done in the meeting itself has no "data" span.
int ReplicaGroup::track(int rank) const {
  return first_id_ + rank + (on_async_lane ? timeline::kAsyncLaneTrack : 0);
}

void ReplicaGroup::issue_async(int rank, std::shared_ptr<AsyncCollective> job) {
  Slot& slot = slots_[static_cast<std::size_t>(rank)];
  ReplicaDevice* device = static_cast<std::size_t>(rank) < devices_.size() ? devices_[static_cast<std::size_t>(rank)] : nullptr;
  if (!slot.lane) {
    slot.lane = std::make_unique<AsyncLane>(absl::StrCat("async/r", first_id_ + rank), [device] {
      on_async_lane = true;
      // A device that cannot be bound fails the lane's first collective with its own error.
      try {
        if (device != nullptr) device->bind_lane_thread();
      } catch (...) {
      }
    });
  }
  if (device != nullptr) {
    if (std::shared_ptr<AsyncCallOrder> order = device->issue_async_call()) {
      job->set_device_order(device, std::move(order));
      slot.unjoined = true;
    }
  }
  slot.lane->push(std::move(job));
}

void ReplicaGroup::drain_lane(int rank, AsyncLane& lane) {
  lane.drain();
  Slot& slot = slots_[static_cast<std::size_t>(rank)];
  if (!slot.unjoined) return;
  slot.unjoined = false;
  devices_[static_cast<std::size_t>(rank)]->join_async_calls();
}

void ReplicaGroup::drain_async(int rank) {
  AsyncLane* lane = slots_[static_cast<std::size_t>(rank)].lane.get();
  if (lane == nullptr) return;
  try {
    drain_lane(rank, *lane);
  } catch (...) {
    // The run has failed already (and the replica's device is waited for next).
  }
  // The run has failed already: its first error is the one it reports.
  lane->take_unobserved_error();
}

void ReplicaGroup::finish_async_before(int rank) {
  AsyncLane* lane = slots_[static_cast<std::size_t>(rank)].lane.get();
  if (lane != nullptr && !on_async_lane) [[unlikely]] drain_lane(rank, *lane);
}

void ReplicaGroup::run_collective(int rank, CollectiveCall& call, CollectiveKind kind, DataPhase data_phase) {
  finish_async_before(rank);
  call.op.kind = kind;
  timeline::Span span(track(rank), collective::kind_name(kind), [&] { return replica_args(rank, call); });
  bool data_to_do = false;
  {
    timeline::Span wait(track(rank), "wait");
    data_to_do = synchronise(rank, call);
  }
  if (!data_to_do) return;
  timeline::Span data(track(rank), "data");
  phase_.assume_shared();
  (communicator_.get()->*data_phase)(rank, ops_);
}

void ReplicaGroup::all_reduce(int rank, CollectiveCall& call) {
  run_collective(rank, call, CollectiveKind::kAllReduce, &collective::Communicator::all_reduce);
}

void ReplicaGroup::all_gather(int rank, CollectiveCall& call) {
  run_collective(rank, call, CollectiveKind::kAllGather, &collective::Communicator::all_gather);
}

void ReplicaGroup::reduce_scatter(int rank, CollectiveCall& call) {
  run_collective(rank, call, CollectiveKind::kReduceScatter, &collective::Communicator::reduce_scatter);
}

// merge_fn runs inside the wait, on the replica that completes the phase.
std::shared_ptr<void> ReplicaGroup::merge_call(int rank, CollectiveCall& call) {
  finish_async_before(rank);
  call.op.kind = CollectiveKind::kMergeCall;
  timeline::Span span(track(rank), "merge_call", [&] { return replica_args(rank, call); });
  {
    timeline::Span wait(track(rank), "wait");
    synchronise(rank, call);
  }
  phase_.assume_shared();
  return merge_result_;
}

void ReplicaGroup::replica_returned(int rank) {
  // The return call is made once, in the constructor: only its sequence changes, so a return
  // writes no line of it that the completer of the last phase read.
  Slot& slot = slots_[static_cast<std::size_t>(rank)];
  if (slot.lane) [[unlikely]] {
    drain_lane(rank, *slot.lane);
    if (std::exception_ptr unwaited = slot.lane->take_unobserved_error()) std::rethrow_exception(unwaited);
  }
  CollectiveCall& call = slot.returned;
  call.op.sequence = ++slot.sequence;
  slot.call = &call;
  if (small_) small_->post(rank, call);
  // When every replica returned (after the same collectives, as the phases line up) there is
  // nothing to compare or run, unless the other workers are to hear of it.
  rendezvous_.arrive(rank, [this](bool every_replica_returned) {
    if (!every_replica_returned || agreement_ != nullptr) {
      phase_.assume_held();
      complete_phase();
    }
  });
}

void ReplicaGroup::fail(int rank, std::exception_ptr error) {
  {
    // Tag a library error with the replica that raised it, unless it is a release caused by an
    // earlier failure (which is never recorded as the run's error).
    MutexLock lock(mu_);
    if (!first_error_) {
      try {
        std::rethrow_exception(error);
      } catch (Error& e) {
        if (e.replica_id() < 0) e.set_replica_id(first_id_ + rank);
      } catch (...) {
      }
      first_error_rank_ = rank;
    }
  }
  record_failure(error,
                 std::make_exception_ptr(AbortedError(absl::StrCat(
                     "replica ", first_id_ + rank, " raised: ", describe_exception(error),
                     "; the other replicas were released from their collectives"))),
                 /*spare_agreed=*/true);
}

void ReplicaGroup::record_failure(std::exception_ptr root, std::exception_ptr release, bool spare_agreed) {
  {
    MutexLock lock(mu_);
    if (!first_error_) first_error_ = root;
    // The other workers take the steps agreed ahead whatever happens here; so do this worker's
    // replicas, whose lanes hold those calls (every replica issued them before the vote), and the
    // release waits for the last of them (complete_phase). A failure of the steps themselves, or a
    // timeout, releases at once: the workers see it too.
    if (spare_agreed && (voting_ahead_ || agreed_through_ > completed_through_)) {
      if (!held_release_) held_release_ = std::move(release);
      return;
    }
    if (held_release_) release = std::exchange(held_release_, nullptr);  // the earlier failure's
  }
  release_now(std::move(release));
}

void ReplicaGroup::release_now(std::exception_ptr release) {
  failed_.store(true, std::memory_order_release);
  rendezvous_.abort(std::move(release));
  if (small_) small_->wake_all();
}

std::exception_ptr ReplicaGroup::first_error() const {
  if (!failed()) return nullptr;
  MutexLock lock(mu_);
  return first_error_;
}

}  // namespace distribute::detail


