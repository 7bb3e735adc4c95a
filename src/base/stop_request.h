// distribute::detail::stop_request: this process's wish that the job stop at the next step and
// save a checkpoint (a preemption: SIGTERM, or a termination watcher that fired). It lives in the
// lowest layer because two sides meet here: PreemptionCheckpointHandler (checkpoint/preemption.h)
// and its signal handler raise it, and the workers' per-step vote (replica/call_agreement.h) carries
// it to every other worker, so that all of them learn of it in the same vote at no extra cost.
#pragma once

#include <atomic>

namespace distribute::detail::stop_request {

// Raised from a signal handler too, hence lock-free and touched by plain loads and stores only.
extern std::atomic<bool> raised;
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler raises the stop request");

inline bool is_raised() { return raised.load(std::memory_order_relaxed); }

}  // namespace distribute::detail::stop_request
