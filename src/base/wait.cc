// Waiting between threads: spin, yield, then a futex; deadlines.
#include "base/wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>
#include <thread>

namespace distribute::detail {

Deadline deadline_after(std::chrono::duration<double> timeout) {
  if (timeout.count() <= 0) return kNoDeadline;
  const auto now = Clock::now();
  const auto step = std::chrono::duration_cast<Clock::duration>(timeout);
  return step >= kNoDeadline - now ? kNoDeadline : now + step;
}

WaitPolicy WaitPolicy::for_threads(int threads) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  WaitPolicy policy;
  if (static_cast<unsigned>(threads) > cores) policy.spin = std::chrono::nanoseconds::zero();
  return policy;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void yield_core() { sched_yield(); }

PollPacer::~PollPacer() {
  if (saved_slack_ns_ >= 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(saved_slack_ns_), 0, 0, 0);
}

bool PollPacer::pause() {
  if (saved_slack_ns_ < 0) {
    if (Clock::now() - start_ < kYieldFor) {
      yield_core();
      return false;
    }
    const int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (slack >= 0 && prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0) saved_slack_ns_ = slack;
  }
  std::this_thread::sleep_for(kSleep);
  return true;
}

void WaitWord::park(std::uint32_t old, Deadline deadline) {
  timespec ts{};
  timespec* timeout = nullptr;
  if (deadline != kNoDeadline) {
    const auto left = std::max(Clock::duration::zero(), deadline - Clock::now());
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    ts.tv_sec = static_cast<time_t>(ns / 1000000000);
    ts.tv_nsec = static_cast<long>(ns % 1000000000);
    timeout = &ts;
  }
  // EAGAIN (value already changed), EINTR and ETIMEDOUT all send the caller back to re-check.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&value), FUTEX_WAIT_PRIVATE, old, timeout,
          nullptr, 0);
}

void WaitWord::bump_and_wake_all() {
  value.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&value), FUTEX_WAKE_PRIVATE, INT_MAX,
            nullptr, nullptr, 0);
  }
}

}  // namespace distribute::detail
