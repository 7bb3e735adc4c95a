// Shared helpers for the tests: device lists, and a watchdog that fails a test instead of letting
// a hang block ctest, with the running test's name to say which one hung.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace distribute::testing {

// {"CPU:0", ..., "CPU:n-1"}
inline std::vector<std::string> cpu_devices(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return devices;
}

// Aborts the process with a message if not destroyed within `limit`.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::milliseconds limit, std::string what = "test")
      : thread_([this, limit, what = std::move(what)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "watchdog: %s did not finish within %lld ms (a hang)\n", what.c_str(),
                         static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// "Suite.Test" of the running test.
inline std::string current_test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

}  // namespace distribute::testing
