// Rendezvous: arrivals, releases, withdrawals on timeout, and aborts.
#include "collective/rendezvous.h"

#include "distribute/check.h"
#include "distribute/errors.h"

namespace distribute::collective {
namespace {

// state_'s fields.
constexpr std::uint64_t kOneGeneration = std::uint64_t{1} << 32;
constexpr std::uint64_t kPhaseMask = kOneGeneration - 1;  // both counts of the current phase
constexpr int kLeavingShift = 16;
constexpr std::uint64_t kOneLeaving = std::uint64_t{1} << kLeavingShift;
constexpr std::uint64_t kArrivalMask = kOneLeaving - 1;
// A rank's Arrivals::count: (epoch << 32) | arrivals.
constexpr std::uint64_t kCountMask = kOneGeneration - 1;

}  // namespace

Rendezvous::Rendezvous(int size, detail::WaitPolicy policy)
    : size_(size), policy_(policy), arrivals_(new Arrivals[static_cast<std::size_t>(size)]) {
  DISTRIBUTE_CHECK(size > 0 && static_cast<std::uint64_t>(size) <= kArrivalMask, InvalidArgumentError,
                   "a rendezvous of ", size, " participants; it takes 1 to ", kArrivalMask);
}

Rendezvous::Outcome Rendezvous::arrive_and_wait(int rank, detail::Deadline deadline,
                                                absl::FunctionRef<void()> complete,
                                                absl::FunctionRef<void()> meanwhile) {
  if (aborted()) throw_abort_error();
  const std::uint32_t released = released_.value.load(std::memory_order_seq_cst);
  Arrivals& mine = arrivals_[static_cast<std::size_t>(rank)];
  // A rank that timed out and withdrew still counts as arrived at that phase (so behind() keeps
  // naming the others); its next arrival is at the same phase, not a new one.
  if (mine.withdrawn_epoch.load(std::memory_order_relaxed) == epoch_) {
    mine.withdrawn_epoch.store(0, std::memory_order_relaxed);
  } else {
    count_arrival(mine);
  }
  const std::uint64_t before = state_.fetch_add(1, std::memory_order_acq_rel);
  if ((before & kArrivalMask) + 1 == static_cast<std::uint64_t>(size_)) {
    complete();
    state_.store((before & ~kPhaseMask) + kOneGeneration, std::memory_order_release);
    released_.bump_and_wake_all();
    meanwhile();
    return released_outcome(before >> 32);
  }
  meanwhile();
  auto stop = [this] { return aborted_.load(std::memory_order_seq_cst); };
  if (!released_.wait_while_equal(released, deadline, policy_, stop) || aborted()) {
    // The deadline or an abort: withdraw the arrival, so that the phase cannot complete without
    // this rank, unless it is completing already. Then `complete` may be reading what this rank
    // holds (a call's buffers) until it returns, so the rank waits for it, deadline or abort.
    std::uint64_t s = state_.load(std::memory_order_acquire);
    while ((s >> 32) == (before >> 32) && (s & kArrivalMask) < static_cast<std::uint64_t>(size_)) {
      if (state_.compare_exchange_weak(s, s - 1, std::memory_order_acq_rel)) {
        mine.withdrawn_epoch.store(epoch_, std::memory_order_relaxed);
        if (aborted()) throw_abort_error();
        return Outcome::kTimedOut;
      }
    }
    wait_for_completion(before >> 32);
  }
  return released_outcome(before >> 32);
}

void Rendezvous::wait_for_completion(std::uint64_t generation) {
  for (std::uint32_t seen = released_.value.load(std::memory_order_seq_cst);
       (state_.load(std::memory_order_acquire) >> 32) == generation;
       seen = released_.value.load(std::memory_order_acquire)) {
    released_.wait_while_equal(seen, detail::kNoDeadline, policy_, [] { return false; });
  }
}

Rendezvous::Outcome Rendezvous::released_outcome(std::uint64_t generation) const {
  const bool completed = (state_.load(std::memory_order_acquire) >> 32) != generation;
  if (!aborted() || (completed && abort_generation_.load(std::memory_order_acquire) > generation)) {
    if (completed) return Outcome::kCompleted;
  }
  throw_abort_error();
}

void Rendezvous::arrive(int rank, absl::FunctionRef<void(bool every_rank_left)> complete) {
  if (aborted()) return;
  count_arrival(arrivals_[static_cast<std::size_t>(rank)]);
  const std::uint64_t before = state_.fetch_add(1 + kOneLeaving, std::memory_order_acq_rel);
  if ((before & kArrivalMask) + 1 == static_cast<std::uint64_t>(size_)) {
    const bool every_rank_left = ((before >> kLeavingShift) & kArrivalMask) + 1 == static_cast<std::uint64_t>(size_);
    complete(every_rank_left);
    state_.store((before & ~kPhaseMask) + kOneGeneration, std::memory_order_release);
    if (!every_rank_left) released_.bump_and_wake_all();
  }
}

void Rendezvous::arrive_and_wait_uninterruptible() {
  const std::uint64_t before = state_.fetch_add(1, std::memory_order_acq_rel);
  if ((before & kArrivalMask) + 1 == static_cast<std::uint64_t>(size_)) {
    state_.store((before & ~kPhaseMask) + kOneGeneration, std::memory_order_release);
    released_.bump_and_wake_all();
    return;
  }
  // Only this phase's completion releases: an abort (which also bumps `released_`) does not.
  wait_for_completion(before >> 32);
}

void Rendezvous::abort(std::exception_ptr error) {
  {
    detail::MutexLock lock(abort_mu_);
    if (abort_error_) return;
    abort_error_ = std::move(error);
    abort_generation_.store(state_.load(std::memory_order_acquire) >> 32, std::memory_order_release);
  }
  aborted_.store(true, std::memory_order_seq_cst);
  released_.bump_and_wake_all();
}

std::vector<int> Rendezvous::behind(int rank) const {
  std::vector<int> ranks;
  const std::uint64_t mine = arrivals_of(arrivals_[static_cast<std::size_t>(rank)]);
  for (int r = 0; r < size_; ++r) {
    if (arrivals_of(arrivals_[static_cast<std::size_t>(r)]) < mine) ranks.push_back(r);
  }
  return ranks;
}

void Rendezvous::count_arrival(Arrivals& arrivals) const {
  const std::uint64_t count = arrivals.count.load(std::memory_order_relaxed);
  arrivals.count.store(((count >> 32) == epoch_ ? count : epoch_ << 32) + 1, std::memory_order_relaxed);
}

std::uint64_t Rendezvous::arrivals_of(const Arrivals& arrivals) const {
  const std::uint64_t count = arrivals.count.load(std::memory_order_relaxed);
  return (count >> 32) == epoch_ ? (count & kCountMask) : 0;
}

void Rendezvous::reset() {
  // Arrivals are left only by a failed run; a store would take the line from the last replica.
  if (const std::uint64_t s = state_.load(std::memory_order_relaxed); (s & kPhaseMask) != 0) {
    state_.store(s & ~kPhaseMask, std::memory_order_relaxed);
  }
  ++epoch_;
  if (!aborted()) return;
  detail::MutexLock lock(abort_mu_);
  abort_error_ = nullptr;
  aborted_.store(false, std::memory_order_release);
}

void Rendezvous::throw_abort_error() const {
  std::exception_ptr error;
  {
    detail::MutexLock lock(abort_mu_);
    error = abort_error_;
  }
  if (!error) throw InternalError("rendezvous aborted without an error");
  std::rethrow_exception(error);
}

}  // namespace distribute::collective
