// MirroredStrategy: synchronous replicas on several devices of one machine
// (tf.distribute.MirroredStrategy). Each replica has its own persistent thread, created once with
// the strategy, so run() costs microseconds. "CPU:k" names logical CPU devices: N CPU replicas on
// one host, collectives through shared memory (collective/cpu/). "GPU:k" names logical GPUs
// (device/gpu.h): each replica thread binds its GPU once and orders all its work on its own CUDA
// stream; run() returns when every replica's stream has drained. Between GPUs, collectives go
// through NCCL, or through one device where NCCL cannot go (several replicas on one physical GPU).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "distribute/strategy/strategy.h"

namespace distribute {

// How replicas' values are combined (tf.distribute's cross_device_ops argument).
enum class CrossDeviceOps {
  // CPU devices: shared memory. Distinct physical GPUs: NCCL when built, else one device.
  // Several replicas on one physical GPU: one device.
  kAuto,
  // tf.distribute.NcclAllReduce: one NCCL communicator per replica. Needs GPUs that are distinct
  // physical devices (InvalidArgumentError otherwise) and a build with NCCL (UnimplementedError).
  kNcclAllReduce,
  // tf.distribute.ReductionToOneDevice: the first replica's device reduces, the others copy the
  // result. Works for any devices, CPU ones included.
  kReductionToOneDevice,
};

struct MirroredStrategyOptions {
  // Defaults for every collective (a timeout here bounds every wait of every run).
  CommunicationOptions communication;
  // Pin replica thread i to core i % cores (off by default).
  bool pin_threads = false;
  CrossDeviceOps cross_device_ops = CrossDeviceOps::kAuto;
};

class MirroredStrategy final : public Strategy {
 public:
  // No devices: every logical GPU, or a single "CPU:0" replica when there is none. Throws
  // InvalidArgumentError for bad or duplicate device strings or a mix of CPUs and GPUs,
  // OutOfRangeError for a GPU that does not exist, UnimplementedError for GPUs in a build without
  // CUDA.
  explicit MirroredStrategy(std::vector<std::string> devices = {});
  MirroredStrategy(std::vector<std::string> devices, MirroredStrategyOptions options);
  ~MirroredStrategy() override;
  std::string name() const override;
  // The backend combining values: "SharedMemoryAllReduce", "NcclAllReduce" or
  // "ReductionToOneDevice".
  std::string_view cross_device_ops() const;
};

}  // namespace distribute
