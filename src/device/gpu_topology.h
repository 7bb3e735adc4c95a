// distribute::detail: the map from logical GPUs ("GPU:k") to physical ones, kept apart from CUDA so
// that its rules (configure before first use, numbering, limits) are tested on machines without a
// GPU. The process-wide instance is built from the CUDA device count on first use.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "distribute/device/gpu.h"

namespace distribute::detail {

class GpuTopology {
 public:
  explicit GpuTopology(int num_physical);

  // See distribute::set_logical_device_configuration.
  void configure(int physical_gpu, std::vector<LogicalDeviceConfiguration> configs);

  // The queries fix the configuration: configure() throws from then on.
  int num_physical() const { return num_physical_; }
  int num_logical();
  // OutOfRangeError naming the visible GPUs when `gpu` does not exist.
  int physical_of(const Device& gpu);
  std::size_t memory_limit(const Device& gpu);

 private:
  struct Logical {
    int physical;
    std::size_t memory_limit;
  };
  const std::vector<Logical>& frozen();
  const Logical& logical(const Device& gpu);

  const int num_physical_;
  Mutex mu_;
  std::vector<std::vector<LogicalDeviceConfiguration>> configs_ ABSL_GUARDED_BY(mu_);  // per physical GPU
  std::atomic<bool> frozen_{false};
  std::vector<Logical> logical_;  // written once, before frozen_ is set
};

// The process's topology.
GpuTopology& gpu_topology();

}  // namespace distribute::detail
