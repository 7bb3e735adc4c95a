// distribute::detail::CallWatchdog: notices a call that must return promptly and has not.
//
// The MPI engine waits with deadlines by polling non-blocking MPI calls, each of which returns at
// once, so a deadline can always be checked between two of them. One can still spin for ever:
// Open MPI's shared-memory transport appends a message to a peer's queue in two writes, and a
// reader whose sender was stopped (SIGSTOP, a debugger) between them waits inside MPI for the
// second. No deadline reaches a thread that does not come back from a call; a thread of the
// watchdog's own sees it and acts (for MPI: says what happened and ends the process, which ends
// the job instead of hanging it).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace distribute::detail {

class CallWatchdog {
 public:
  // Called once, on the watchdog's thread, when one section has lasted `limit` or more; given
  // how long it has lasted so far.
  using OnStuck = std::function<void(std::chrono::milliseconds stuck_for)>;

  CallWatchdog(std::chrono::milliseconds limit, OnStuck on_stuck);
  ~CallWatchdog();
  CallWatchdog(const CallWatchdog&) = delete;
  CallWatchdog& operator=(const CallWatchdog&) = delete;

  // Mark the start and the end of one call, a section. Sections never overlap: their callers
  // hold a lock.
  void enter() { sequence_.fetch_add(1); }
  void leave() { sequence_.fetch_add(1); }

  // A section for a scope.
  class Section {
   public:
    explicit Section(CallWatchdog& watchdog) : watchdog_(watchdog) { watchdog_.enter(); }
    ~Section() { watchdog_.leave(); }
    Section(const Section&) = delete;
    Section& operator=(const Section&) = delete;

   private:
    CallWatchdog& watchdog_;
  };

 private:
  void watch();

  const std::chrono::milliseconds limit_;
  const OnStuck on_stuck_;
  // Odd while a section is open; each section adds 2, so an odd value seen twice is one section.
  std::atomic<std::uint64_t> sequence_{0};
  std::mutex stop_mutex_;
  std::condition_variable stop_changed_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace distribute::detail
