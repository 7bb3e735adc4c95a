// AsyncCollective and AsyncLane: collectives run on a replica's own second thread, in issue order.
#include "replica/async_lane.h"

#include <pthread.h>

#include <utility>

#include "device/replica_device.h"

namespace distribute::detail {

void AsyncCollective::set_device_order(ReplicaDevice* device, std::shared_ptr<AsyncCallOrder> order) {
  device_ = device;
  order_ = std::move(order);
}

void AsyncCollective::forget_device_order() {
  if (!order_) return;
  work_ = nullptr;
  order_.reset();
  device_ = nullptr;
}

void AsyncCollective::run() noexcept {
  try {
    if (order_) device_->begin_async_call(*order_);
    work_();
  } catch (...) {
    error_ = std::current_exception();
  }
  if (order_) {
    try {
      device_->end_async_call(*order_);
    } catch (...) {
      if (!error_) error_ = std::current_exception();
    }
  } else {
    work_ = nullptr;  // the buffers go as soon as the collective is over
  }
  done_.store(1, std::memory_order_release);
  done_.notify_all();
}

void AsyncCollective::wait() {
  while (done_.load(std::memory_order_acquire) == 0) done_.wait(0, std::memory_order_acquire);
  observed_.store(true, std::memory_order_release);
  if (error_) std::rethrow_exception(error_);
  if (order_) device_->use_async_result(*order_);
}

AsyncLane::AsyncLane(std::string name, std::function<void()> setup)
    : thread_([this, setup = std::move(setup)] { loop(setup); }) {
  pthread_setname_np(thread_.native_handle(), name.substr(0, 15).c_str());
}

AsyncLane::~AsyncLane() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void AsyncLane::push(std::shared_ptr<AsyncCollective> job) {
  pending_.fetch_add(1, std::memory_order_acq_rel);
  {
    MutexLock lock(mu_);
    since_last_check_.push_back(job);
    queue_.push_back(std::move(job));
  }
  changed_.notify_all();
}

void AsyncLane::drain() {
  if (!busy()) return;
  MutexLock lock(mu_);
  while (pending_.load(std::memory_order_acquire) != 0) changed_.wait(mu_);
}

void AsyncLane::queued(std::size_t max, std::vector<std::shared_ptr<AsyncCollective>>& out) {
  out.clear();
  MutexLock lock(mu_);
  for (std::size_t j = 0; j < queue_.size() && j < max; ++j) out.push_back(queue_[j]);
}

std::exception_ptr AsyncLane::take_unobserved_error() {
  MutexLock lock(mu_);
  std::exception_ptr error;
  for (const std::shared_ptr<AsyncCollective>& job : since_last_check_) {
    if (!error) error = job->unobserved_error();
    job->forget_device_order();
  }
  since_last_check_.clear();
  return error;
}

void AsyncLane::loop(const std::function<void()>& setup) {
  if (setup) setup();
  for (;;) {
    std::shared_ptr<AsyncCollective> job;
    {
      MutexLock lock(mu_);
      while (queue_.empty() && !stopping_) changed_.wait(mu_);
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job->run();
    job.reset();
    {
      MutexLock lock(mu_);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
    changed_.notify_all();
  }
}

}  // namespace distribute::detail
