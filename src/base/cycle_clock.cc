// The rate of cycle_now(), measured once per process against steady_clock.
#include "base/cycle_clock.h"

#include <chrono>

namespace distribute::detail {
namespace {

double measure_ticks_per_second() {
  // 5 ms between two readings of each clock: a reading's own jitter (tens of nanoseconds) then
  // moves the rate by about 1e-5.
  constexpr auto kSpan = std::chrono::milliseconds(5);
  const std::int64_t ticks0 = cycle_now();
  const Clock::time_point time0 = Clock::now();
  Clock::time_point time1 = time0;
  while (time1 - time0 < kSpan) time1 = Clock::now();
  const std::int64_t ticks1 = cycle_now();
  return static_cast<double>(ticks1 - ticks0) / std::chrono::duration<double>(time1 - time0).count();
}

}  // namespace

double cycle_ticks_per_second() {
  static const double rate = measure_ticks_per_second();
  return rate;
}

}  // namespace distribute::detail
