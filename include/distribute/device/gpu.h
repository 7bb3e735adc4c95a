// GPUs as distribute sees them: how many are visible, how physical GPUs split into logical ones
// (tf.config.set_logical_device_configuration), and the CUDA stream a replica's work is ordered
// on. "GPU:k" always names logical GPU k; without a configuration each physical GPU is one logical
// GPU. In a build without CUDA every query answers "no GPU" and configuring one throws
// UnimplementedError, so code written for GPUs still compiles and takes its CPU path.
//
//   distribute::set_logical_device_configuration(0, {{}, {}});  // GPU:0 and GPU:1 on physical 0
//   distribute::MirroredStrategy strategy({"GPU:0", "GPU:1"});  // reduces through one device
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "distribute/device/device.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*; declared here so users need no CUDA headers

namespace distribute {

// One logical device carved out of a physical GPU (tf.config.LogicalDeviceConfiguration).
struct LogicalDeviceConfiguration {
  // Bytes this logical device may hold in tensors at once; 0 means no limit of its own.
  // Allocations beyond it throw ResourceExhaustedError.
  std::size_t memory_limit = 0;
};

// Physical GPUs visible to this process (0 without a CUDA build, a driver or a GPU).
int num_physical_gpus();
// Why num_physical_gpus() is 0, for skip messages and errors ("" when GPUs are visible).
std::string gpu_unavailable_reason();

// Splits physical GPU `physical_gpu` into configs.size() logical GPUs. Must run before any GPU is
// used (a strategy or tensor on "GPU:k" fixes the configuration): later calls throw
// FailedPreconditionError, as tf.config does. InvalidArgumentError for an empty list,
// OutOfRangeError for a physical GPU that does not exist.
void set_logical_device_configuration(int physical_gpu, std::vector<LogicalDeviceConfiguration> configs);
// The logical GPUs ("GPU:0", "GPU:1", ...), in order: physical GPU 0's first.
std::vector<Device> list_logical_gpus();
// The physical GPU behind logical GPU `gpu`; OutOfRangeError when it does not exist.
int physical_gpu_of(const Device& gpu);

namespace cuda {
// The stream this thread's GPU work is ordered on: inside a replica of a GPU strategy, the
// replica's own stream (collectives and tensor copies go on it, so user kernels launched on it
// are ordered with them); elsewhere CUDA's legacy default stream, which waits for every replica
// stream of its device. Strategy::run returns after each replica's stream has drained.
CUstream_st* current_stream();
}  // namespace cuda

}  // namespace distribute
