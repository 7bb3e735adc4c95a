// CallWatchdog (src/base/call_watchdog.h): a section left open past the limit is reported once,
// with how long it lasted; sections that close in time, however many, never are.
#include "base/call_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace distribute::detail {
namespace {

using std::chrono::milliseconds;

TEST(CallWatchdog, ASectionOpenPastTheLimitIsReportedOnce) {
  std::atomic<int> reports{0};
  std::atomic<long long> reported_ms{0};
  CallWatchdog watchdog(milliseconds(200), [&](milliseconds stuck_for) {
    reported_ms = stuck_for.count();
    reports += 1;
  });
  {
    CallWatchdog::Section stuck(watchdog);
    std::this_thread::sleep_for(milliseconds(1500));
  }
  EXPECT_EQ(reports.load(), 1);
  EXPECT_GE(reported_ms.load(), 200);
}

TEST(CallWatchdog, ShortSectionsInARowAreNeverReported) {
  std::atomic<int> reports{0};
  CallWatchdog watchdog(milliseconds(200), [&](milliseconds) { reports += 1; });
  // 1 s of back-to-back sections of 1 ms: the watchdog always finds one open, never the same.
  const auto end = std::chrono::steady_clock::now() + milliseconds(1000);
  while (std::chrono::steady_clock::now() < end) {
    CallWatchdog::Section call(watchdog);
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(reports.load(), 0);
}

TEST(CallWatchdog, TimeOutsideSectionsIsNeverReported) {
  std::atomic<int> reports{0};
  CallWatchdog watchdog(milliseconds(100), [&](milliseconds) { reports += 1; });
  { CallWatchdog::Section call(watchdog); }
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(reports.load(), 0);
}

TEST(CallWatchdog, EachStuckSectionIsReported) {
  std::atomic<int> reports{0};
  CallWatchdog watchdog(milliseconds(100), [&](milliseconds) { reports += 1; });
  for (int i = 0; i < 2; ++i) {
    CallWatchdog::Section stuck(watchdog);
    std::this_thread::sleep_for(milliseconds(500));
  }
  EXPECT_EQ(reports.load(), 2);
}

}  // namespace
}  // namespace distribute::detail
