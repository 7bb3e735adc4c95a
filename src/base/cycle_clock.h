// distribute::detail: the tick counter the replicas' straggler figures time their waits with.
//
// A waiting replica reads a clock when its wait starts and again when it is released; the second
// reading sits on the critical path of the next collective. std::chrono::steady_clock is a vDSO
// call (about 28 ns under kvm-clock), and Abseil's GetCurrentTimeNanos shares state between
// threads, so two replicas reading it at once slow each other's release by half a microsecond.
// The CPU's own counter is read in a few nanoseconds and shares nothing; its rate is measured once
// against steady_clock when a figure is first turned into seconds.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "base/wait.h"

namespace distribute::detail {

// Ticks of a counter that runs at a constant rate on every core: the TSC on x86, the virtual
// counter on AArch64, steady_clock elsewhere.
inline std::int64_t cycle_now() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  return static_cast<std::int64_t>(__rdtsc());
#elif defined(__aarch64__)
  std::int64_t ticks;
  asm volatile("mrs %0, cntvct_el0" : "=r"(ticks));
  return ticks;
#else
  return Clock::now().time_since_epoch().count();
#endif
}

// cycle_now()'s ticks per second; the first call in a process measures it over a few
// milliseconds.
double cycle_ticks_per_second();

}  // namespace distribute::detail
