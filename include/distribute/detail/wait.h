// distribute::detail: the one way replica threads wait for each other. A waiter spins for a short
// while (long enough to catch a partner that is a few microseconds behind) and then parks on a
// futex, so waiting longer than briefly does not burn a core even when replicas outnumber cores.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace distribute::detail {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();

// A deadline `timeout` from now; a zero timeout means none.
Deadline deadline_after(std::chrono::duration<double> timeout);

struct WaitPolicy {
  // How long to spin before parking.
  std::chrono::nanoseconds spin{std::chrono::microseconds(50)};

  // The policy for `threads` threads that wait for each other on this machine: spin only briefly
  // when they outnumber the cores, since a spinning waiter then keeps the awaited thread off a core.
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

template <class Stop>
bool WaitWord::wait_while_equal(std::uint32_t old, Deadline deadline, const WaitPolicy& policy,
                                Stop&& stop) {
  const Deadline spin_until = Clock::now() + policy.spin;
  for (std::uint32_t i = 0;; ++i) {
    if (stop() || value.load(std::memory_order_acquire) != old) return true;
    if ((i & 63) == 63 && Clock::now() >= spin_until) break;
    cpu_relax();
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
