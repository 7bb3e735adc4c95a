// ReplicaRunner: the persistent threads of a multi-replica strategy, created once. run(job) runs
// job(0) on the calling thread and hands job(r) to thread r for r >= 1, and returns when all have
// finished: the caller would only wait otherwise, and one thread fewer to wake is one handover
// fewer per run, and leaves N threads on N cores, where waiting threads may spin. Starting and
// joining are one futex word each, so an empty run costs microseconds. The job itself travels in
// the start word's cache line, a copy rather than a reference to the caller's stack: a woken
// thread finds all it needs in the one line it was woken by, instead of then fetching the
// caller's freshly written frame from the other core.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/wait.h"

namespace distribute::detail {

class ReplicaRunner {
 public:
  // `name` prefixes the threads' names ("<name>/r3"); with pin_threads, the thread of replica i
  // runs on core i % cores (replica 0 runs on the caller's thread, which is left as it is);
  // `policy` says how its threads wait for work.
  ReplicaRunner(int num_replicas, const std::string& name, bool pin_threads, WaitPolicy policy);
  ~ReplicaRunner();
  ReplicaRunner(const ReplicaRunner&) = delete;
  ReplicaRunner& operator=(const ReplicaRunner&) = delete;

  // The most bytes a job may have: what the start word's line leaves.
  static constexpr std::size_t kMaxJobBytes = 48;

  // Runs job(r) for every replica r, job(0) on the calling thread; job must not throw, and is
  // copied (a lambda capturing a few pointers and values). Not reentrant: one run at a time.
  template <class Job>
  void run(const Job& job) {
    static_assert(std::is_trivially_copyable_v<Job> && sizeof(Job) <= kMaxJobBytes &&
                      alignof(Job) <= alignof(std::max_align_t),
                  "a ReplicaRunner job is a small trivially copyable callable");
    constexpr Invoke invoke = [](const std::byte* stored, int replica) {
      (*std::launder(reinterpret_cast<const Job*>(stored)))(replica);
    };
    // A loop's runs usually hand over the same bytes: those are left as they are, since writing
    // them would take the line from the threads polling it, once more than bumping the word does.
    if (start_.invoke != invoke || std::memcmp(start_.job, &job, sizeof(Job)) != 0) {
      ::new (start_.job) Job(job);
      start_.invoke = invoke;
    }
    run_stored_job();
  }

 private:
  void run_stored_job();
  void worker(int replica, bool pin);

  const int num_replicas_;
  const WaitPolicy policy_;
  std::atomic<bool> stop_{false};
  // The start word and the job it announces share one cache line, so a woken thread gets both
  // in one transfer from the caller's core.
  using Invoke = void (*)(const std::byte* job, int replica);
  struct alignas(64) Start {
    WaitWord word;
    Invoke invoke = nullptr;  // set with job, before word is bumped
    alignas(std::max_align_t) std::byte job[kMaxJobBytes];
  };
  static_assert(sizeof(Start) == 64);
  Start start_;
  alignas(64) WaitWord done_;
  std::vector<std::thread> threads_;
};

}  // namespace distribute::detail
