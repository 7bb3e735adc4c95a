// distribute::cluster::StopRequest: a worker's wish that the job stop after the current step and
// save a checkpoint (a preemption: SIGTERM, or a termination watcher that fired). A
// PreemptionCheckpointHandler owns one and raises it; the workers' per-step vote
// (cluster/coordinator.h) reads it, so that every other worker learns of it in the same vote at
// no extra cost. It lives in the lowest layer because those two sides meet here.
#pragma once

#include <atomic>
#include <cstdint>

namespace distribute::cluster {

class StopRequest {
 public:
  void raise() { raised_.store(true, std::memory_order_relaxed); }
  void clear() { raised_.store(false, std::memory_order_relaxed); }

  // Also raised while *signal_flag is nonzero: the flag a signal handler sets, read at every vote
  // so that a signal that arrives during a step is carried by that step's next vote. Set before
  // the request is shown to a vote.
  void follow(const std::atomic<std::int64_t>* signal_flag) { signal_flag_ = signal_flag; }

  bool is_raised() const {
    return raised_.load(std::memory_order_relaxed) ||
           (signal_flag_ != nullptr && signal_flag_->load(std::memory_order_relaxed) != 0);
  }

 private:
  std::atomic<bool> raised_{false};
  const std::atomic<std::int64_t>* signal_flag_ = nullptr;
};

}  // namespace distribute::cluster
