#include "strategy/cross_device_ops.h"

#include "absl/strings/str_cat.h"
#include "distribute/check.h"

namespace distribute::detail {

Backend choose_backend(CrossDeviceOps requested, std::span<const Device> devices, std::span<const int> physical,
                       bool nccl_built) {
  if (devices[0].is_cpu()) {
    DISTRIBUTE_CHECK(requested != CrossDeviceOps::kNcclAllReduce, InvalidArgumentError,
                     "MirroredStrategy: CrossDeviceOps::kNcclAllReduce needs GPU devices and ", devices[0].short_name(),
                     " is a CPU; use kAuto (shared memory) or kReductionToOneDevice");
    return requested == CrossDeviceOps::kReductionToOneDevice ? Backend::kReductionToOneDevice : Backend::kSharedMemory;
  }
  if (requested == CrossDeviceOps::kReductionToOneDevice) return Backend::kReductionToOneDevice;
  // NCCL refuses two ranks on one physical GPU.
  for (std::size_t a = 0; a < devices.size(); ++a) {
    for (std::size_t b = a + 1; b < devices.size(); ++b) {
      if (physical[a] != physical[b]) continue;
      if (requested == CrossDeviceOps::kAuto) return Backend::kReductionToOneDevice;
      throw InvalidArgumentError(absl::StrCat(
          "MirroredStrategy: CrossDeviceOps::kNcclAllReduce cannot run ", devices[a].short_name(), " and ",
          devices[b].short_name(), ": both are logical GPUs of physical GPU ", physical[a],
          ", and NCCL needs one physical GPU per replica; use kReductionToOneDevice or kAuto"));
    }
  }
  if (nccl_built) return Backend::kNccl;
  DISTRIBUTE_CHECK(requested == CrossDeviceOps::kAuto, UnimplementedError,
                   "MirroredStrategy: CrossDeviceOps::kNcclAllReduce needs NCCL and this build of distribute has none "
                   "(reconfigure with -DDISTRIBUTE_WITH_NCCL=ON)");
  return Backend::kReductionToOneDevice;
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kSharedMemory: return "SharedMemoryAllReduce";
    case Backend::kReductionToOneDevice: return "ReductionToOneDevice";
    case Backend::kNccl: return "NcclAllReduce";
  }
  return "unknown";
}

}  // namespace distribute::detail
