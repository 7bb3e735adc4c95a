// distribute::detail: which backend combines a MirroredStrategy's values, chosen once when the
// strategy is built. Kept apart from CUDA so that every rule is tested on machines without a GPU.
#pragma once

#include <span>

#include "distribute/device/device.h"
#include "distribute/strategy/mirrored_strategy.h"

namespace distribute::detail {

enum class Backend { kSharedMemory, kReductionToOneDevice, kNccl };

// Applies `requested` and the strategy's default `implementation` to `devices`, where physical[r]
// is device r's physical GPU (ignored for CPU devices). Throws InvalidArgumentError for NCCL on
// CPU devices or on a physical GPU shared by two replicas, RING on GPU devices, or an
// implementation that contradicts `requested`; UnimplementedError for NCCL in a build without it.
Backend choose_backend(CrossDeviceOps requested, CommunicationImplementation implementation,
                       std::span<const Device> devices, std::span<const int> physical, bool nccl_built);

// "SharedMemoryAllReduce", "ReductionToOneDevice", "NcclAllReduce".
const char* backend_name(Backend backend);

}  // namespace distribute::detail
