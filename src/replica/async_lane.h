// distribute::detail: a replica's async lane, the thread that runs the collectives the replica
// issued without waiting (ReplicaContext::*_async), one after the other in issue order, so that
// every replica's collectives still meet in the same order while the replica goes on computing.
// The group gives each replica one at its first such collective; a blocking collective, a
// merge_call or the replica's return first lets the lane finish what it holds (drain), so the
// order of a replica's calls is its issue order whichever thread runs them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "distribute/replica/internal/async_collective.h"

namespace distribute::detail {

class AsyncLane {
 public:
  // `setup` runs first on the lane's thread (binding it to the replica's device).
  AsyncLane(std::string name, std::function<void()> setup);
  ~AsyncLane();  // finishes what it holds, then joins its thread
  AsyncLane(const AsyncLane&) = delete;
  AsyncLane& operator=(const AsyncLane&) = delete;

  void push(std::shared_ptr<AsyncCollective> job);
  // Returns once every job pushed so far has run.
  void drain();
  // The first `max` jobs (or fewer) pushed and not yet begun, oldest first, into `out`.
  void queued(std::size_t max, std::vector<std::shared_ptr<AsyncCollective>>& out);
  // Whether jobs are pushed and not yet run (an acquire load: the replica's check before each
  // blocking collective).
  bool busy() const { return pending_.load(std::memory_order_acquire) != 0; }
  // The error of the first job pushed since the last call that failed with nobody waiting for
  // it, or null; forgets those jobs (and their device orders). Call after drain(), and after the
  // replica's stream has waited for the lane's work (ReplicaDevice::join_async_calls).
  std::exception_ptr take_unobserved_error();

 private:
  void loop(const std::function<void()>& setup);

  Mutex mu_;
  std::condition_variable_any changed_;
  std::deque<std::shared_ptr<AsyncCollective>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<AsyncCollective>> since_last_check_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<std::int64_t> pending_{0};
  std::thread thread_;
};

}  // namespace distribute::detail
