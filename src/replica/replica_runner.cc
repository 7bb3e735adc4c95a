// ReplicaRunner: the persistent replica threads, started and joined through one futex word each.
#include "replica/replica_runner.h"

#include <pthread.h>
#include <sched.h>

#include <exception>

#include "absl/strings/str_cat.h"
#include "device/storage.h"

namespace distribute::detail {

ReplicaRunner::ReplicaRunner(int num_replicas, const std::string& name, bool pin_threads, WaitPolicy policy)
    : num_replicas_(num_replicas), policy_(policy) {
  threads_.reserve(static_cast<std::size_t>(num_replicas));
  for (int r = 1; r < num_replicas; ++r) {
    threads_.emplace_back([this, r, pin_threads] { worker(r, pin_threads); });
    // Thread names are limited to 15 characters.
    pthread_setname_np(threads_.back().native_handle(), absl::StrCat(name.substr(0, 10), "/r", r).c_str());
  }
}

ReplicaRunner::~ReplicaRunner() {
  stop_.store(true, std::memory_order_relaxed);
  start_.word.bump_and_wake_all();
  for (std::thread& t : threads_) t.join();
}

void ReplicaRunner::run_stored_job() {
  // Each thread adds one to done_ when it has finished: the run is over at `finished`.
  const std::uint32_t finished =
      done_.value.load(std::memory_order_acquire) + static_cast<std::uint32_t>(num_replicas_ - 1);
  if (num_replicas_ > 1) start_.word.bump_and_wake_all();
  {
    ReleaseBatch batch;
    start_.invoke(start_.job, 0);
  }
  for (std::uint32_t seen = done_.value.load(std::memory_order_acquire); seen != finished;
       seen = done_.value.load(std::memory_order_acquire)) {
    done_.wait_while_equal(seen, kNoDeadline, policy_, [] { return false; });
  }
}

void ReplicaRunner::worker(int replica, bool pin) {
  if (pin) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<unsigned>(replica) % cores, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
  std::uint32_t seen = 0;
  while (true) {
    start_.word.wait_while_equal(seen, kNoDeadline, policy_, [] { return false; });
    seen = start_.word.value.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    {
      ReleaseBatch batch;  // given back before the caller hears that this replica is done
      start_.invoke(start_.job, replica);
    }
    done_.bump_and_wake_all();
  }
}

}  // namespace distribute::detail
