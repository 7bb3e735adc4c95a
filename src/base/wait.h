// distribute::detail: the one way replica threads wait for each other, in three phases: spin
// (catches a partner a few microseconds behind at the cost of one core), yield (gives the core to
// the threads being waited for, which matters when replicas outnumber cores), then park on a futex,
// so a wait longer than briefly burns no core at all.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

namespace distribute::detail {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();

// A deadline `timeout` from now; a zero timeout means none.
Deadline deadline_after(std::chrono::duration<double> timeout);

struct WaitPolicy {
  // How long to spin, then how long to keep yielding the core, before parking.
  std::chrono::nanoseconds spin{std::chrono::microseconds(20)};
  std::chrono::nanoseconds yield{std::chrono::microseconds(200)};

  // The policy for `threads` threads that wait for each other on this machine: when they
  // outnumber the cores, no spinning at all (a spinning waiter keeps the awaited thread off its
  // core, however short the spin), only yielding, then parking.
  static WaitPolicy for_threads(int threads);
};

// A futex word with a count of parked waiters, so that waking costs no system call when nobody
// sleeps.
struct WaitWord {
  std::atomic<std::uint32_t> value{0};
  std::atomic<std::uint32_t> sleepers{0};

  // Returns once value != old or stop() is true (true), or at the deadline (false).
  template <class Stop>
  bool wait_while_equal(std::uint32_t old, Deadline deadline, const WaitPolicy& policy, Stop&& stop);
  // value += 1 and wakes every waiter.
  void bump_and_wake_all();

 private:
  // Parks until value may differ from old or the deadline passes.
  void park(std::uint32_t old, Deadline deadline);
};

void cpu_relax();
void yield_core();
// Paces the polls of something that cannot be waited on (a CUDA stream, an NCCL communicator, an
// MPI request): yields the core between polls for the first kYieldFor of the wait, then sleeps
// kSleep at a time. Those sleeps run with the thread's timer slack lowered to 1 µs for the rest of
// the wait (Linux lets a sleep end up to 50 µs late by default, which a stream drained after a
// millisecond of GPU work would pay in full); the destructor restores it.
class PollPacer {
 public:
  static constexpr std::chrono::microseconds kYieldFor{1000};
  static constexpr std::chrono::microseconds kSleep{20};

  PollPacer() = default;
  ~PollPacer();
  PollPacer(const PollPacer&) = delete;
  PollPacer& operator=(const PollPacer&) = delete;

  // Yields or sleeps; returns whether it slept.
  bool pause();

 private:
  Deadline start_ = Clock::now();
  long saved_slack_ns_ = -1;  // the thread's timer slack before the first sleep; -1: unchanged
};

// The one poll loop: polls `done` (which may throw) until it returns true (returns true) or
// `deadline` passes (returns false), paced by a PollPacer. `idle` runs after each sleep, before
// the next poll: what a waiter owes others meanwhile (answering their queries).
template <class Done, class Idle>
bool poll_until(Done&& done, Deadline deadline, Idle&& idle) {
  PollPacer pacer;
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    if (pacer.pause()) idle();
  }
}
template <class Done>
bool poll_until(Done&& done, Deadline deadline) {
  return poll_until(std::forward<Done>(done), deadline, [] {});
}

template <class Stop>
bool WaitWord::wait_while_equal(std::uint32_t old, Deadline deadline, const WaitPolicy& policy,
                                Stop&& stop) {
  // The spin's start is read at its 64th poll: a wait that ends sooner reads no clock.
  Deadline start{};
  for (std::uint32_t i = 0; policy.spin.count() > 0; ++i) {
    if (stop() || value.load(std::memory_order_acquire) != old) return true;
    if ((i & 63) == 63) {
      const Deadline now = Clock::now();
      if (i == 63) start = now;
      if (now - start >= policy.spin) break;
    }
    cpu_relax();
  }
  if (start == Deadline{}) start = Clock::now();
  while (Clock::now() - start < policy.spin + policy.yield) {
    if (stop() || value.load(std::memory_order_acquire) != old) return true;
    if (Clock::now() >= deadline) return false;
    yield_core();
  }
  while (true) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (stop() || value.load(std::memory_order_seq_cst) != old) {
      sleepers.fetch_sub(1, std::memory_order_relaxed);
      return true;
    }
    if (Clock::now() >= deadline) {
      sleepers.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    park(old, deadline);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace distribute::detail
