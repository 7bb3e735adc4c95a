// distribute::collective: Rendezvous, the reusable, generation-counted, abortable and timed barrier behind every collective
// and merge_call. absl::Barrier is single-use and std::barrier can be neither aborted nor timed,
// so neither fits.
//
// Thread safety: arrive_and_wait() is called by each of the `size` participants once per phase,
// each with its own rank; abort() may be called from any thread at any time; reset() only while
// no participant is inside. Everything the last arriver does in `complete` happens-before every
// participant's return from that phase.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "base/mutex.h"
#include "base/wait.h"

namespace distribute::collective {

class Rendezvous {
 public:
  enum class Outcome { kCompleted, kTimedOut };

  Rendezvous(int size, detail::WaitPolicy policy);

  int size() const { return size_; }

  // Arrives as `rank` and waits for the other participants. The last to arrive runs `complete`
  // (which must not throw) before anyone is released. Returns kCompleted when the phase completed;
  // kTimedOut when the deadline passed first, in which case this rank's arrival was withdrawn, so
  // the phase cannot complete without it. Throws the abort error if the rendezvous is or becomes
  // aborted before the phase completes. Neither a deadline nor an abort interrupts a `complete`
  // that has begun: its waiters stay until it returns, since it may read what they hold.
  // `meanwhile` (which must not throw either) runs once as soon as this rank's arrival counts:
  // while it waits for the others, or right after the release when it arrives last, so that work
  // of its own that needs nothing from them fills the wait instead of following it.
  Outcome arrive_and_wait(int rank, detail::Deadline deadline, absl::FunctionRef<void()> complete,
                          absl::FunctionRef<void()> meanwhile = [] {});

  // Arrives as `rank` without waiting for the others: the phase completes when they arrive, and
  // the last arriver runs complete(every_rank_left), where every_rank_left says that every rank
  // arrived through arrive(), so that nobody waits for this phase (and nobody is released). Does
  // nothing once aborted.
  void arrive(int rank, absl::FunctionRef<void(bool every_rank_left)> complete);

  // Waits for all participants ignoring aborts and deadlines: for phases that every participant
  // is known to reach in bounded time (all inside library code that cannot fail).
  void arrive_and_wait_uninterruptible();

  // Releases every waiter now and makes every later arrival throw `error`, until reset(). The
  // first abort's error is kept; later ones are ignored.
  void abort(std::exception_ptr error);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  // Ranks whose number of arrivals since reset() is below `rank`'s (those that have not arrived
  // at the phase `rank` is in).
  std::vector<int> behind(int rank) const;

  void reset();

 private:
  [[noreturn]] void throw_abort_error() const;
  // Waits, ignoring aborts and deadlines, until phase `generation` has completed.
  void wait_for_completion(std::uint64_t generation);
  // The outcome for a participant of phase `generation` once released: kCompleted if that phase
  // completed and was not aborted while completing; throws the abort error otherwise.
  Outcome released_outcome(std::uint64_t generation) const;

  const int size_;
  const detail::WaitPolicy policy_;
  // High 32 bits: the phase's generation; bits 16-31: the arrivals in it through arrive(); low 16
  // bits: all arrivals in it. One word, so that a withdrawal cannot be confused with an arrival
  // at the next phase, and the last arriver learns how the others arrived from its own update.
  alignas(64) std::atomic<std::uint64_t> state_{0};
  alignas(64) detail::WaitWord released_;
  alignas(64) std::atomic<bool> aborted_{false};
  mutable detail::Mutex abort_mu_;
  std::exception_ptr abort_error_ ABSL_GUARDED_BY(abort_mu_);
  // The generation that was current when abort() was called: waiters of an earlier phase that
  // had completed are not affected (they may have been slow to notice the release).
  std::atomic<std::uint64_t> abort_generation_{0};
  // Each rank's own record, written only by that rank, and tagged with the epoch (one per
  // reset()) it belongs to: reset() starts a new epoch instead of writing every rank's line, and a
  // record of an earlier epoch reads as no arrivals, no withdrawal.
  struct alignas(64) Arrivals {
    std::atomic<std::uint64_t> count{0};            // (epoch << 32) | arrivals
    std::atomic<std::uint64_t> withdrawn_epoch{0};  // the epoch of an unanswered withdrawal
  };
  void count_arrival(Arrivals& arrivals) const;
  std::uint64_t arrivals_of(const Arrivals& arrivals) const;
  std::uint64_t epoch_ = 1;  // written by reset() only, while no rank is inside
  std::unique_ptr<Arrivals[]> arrivals_;
};

}  // namespace distribute::collective
