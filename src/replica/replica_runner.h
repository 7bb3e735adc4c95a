// ReplicaRunner: the persistent threads of a multi-replica strategy, created once. run(job) runs
// job(0) on the calling thread and hands job(r) to thread r for r >= 1, and returns when all have
// finished: the caller would only wait otherwise, and one thread fewer to wake is one handover
// fewer per run, and leaves N threads on N cores, where waiting threads may spin. Starting and
// joining are one futex word each, so an empty run costs microseconds.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
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

  // Runs job(r) for every replica r, job(0) on the calling thread; job must not throw. Not
  // reentrant: one run at a time.
  void run(absl::FunctionRef<void(int)> job);

 private:
  void worker(int replica, bool pin);

  const int num_replicas_;
  const WaitPolicy policy_;
  std::atomic<bool> stop_{false};
  // The start word and the job it announces share one cache line, so a woken thread gets both
  // in one transfer from the caller's core.
  struct alignas(64) Start {
    WaitWord word;
    std::optional<absl::FunctionRef<void(int)>> job;  // set before word is bumped
  };
  Start start_;
  alignas(64) WaitWord done_;
  std::vector<std::thread> threads_;
};

}  // namespace distribute::detail
