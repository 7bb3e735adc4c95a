// The watchdog's thread samples the section count a few times per limit: a section still open at
// the same count for the limit is one call that has not returned.
#include "base/call_watchdog.h"

#include <algorithm>
#include <utility>

namespace distribute::detail {

CallWatchdog::CallWatchdog(std::chrono::milliseconds limit, OnStuck on_stuck)
    : limit_(limit), on_stuck_(std::move(on_stuck)), thread_([this] { watch(); }) {}

CallWatchdog::~CallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
  }
  stop_changed_.notify_all();
  thread_.join();
}

void CallWatchdog::watch() {
  using Clock = std::chrono::steady_clock;
  const auto period = std::clamp(limit_ / 8, std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
  std::uint64_t open = 0;  // the section seen open, else 0
  Clock::time_point since;
  bool reported = false;
  std::unique_lock<std::mutex> lock(stop_mutex_);
  while (!stop_changed_.wait_for(lock, period, [this] { return stop_; })) {
    const std::uint64_t now_seen = sequence_.load();
    if (now_seen % 2 == 0 || now_seen != open) {
      open = now_seen % 2 == 1 ? now_seen : 0;
      since = Clock::now();
      reported = false;
      continue;
    }
    const auto stuck_for = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since);
    if (!reported && stuck_for >= limit_) {
      reported = true;
      lock.unlock();
      on_stuck_(stuck_for);
      lock.lock();
    }
  }
}

}  // namespace distribute::detail
