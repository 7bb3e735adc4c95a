// The rules that pick a MirroredStrategy's backend from its devices and options.
#include "strategy/cross_device_ops.h"

#include "absl/strings/str_cat.h"
#include "distribute/check.h"

namespace distribute::detail {
namespace {

// The CrossDeviceOps a default implementation asks for; kAuto leaves `requested` as it is.
CrossDeviceOps apply_implementation(CrossDeviceOps requested, CommunicationImplementation implementation,
                                    const Device& first) {
  switch (implementation) {
    case CommunicationImplementation::kAuto: return requested;
    case CommunicationImplementation::kNccl:
      DISTRIBUTE_CHECK(requested != CrossDeviceOps::kReductionToOneDevice, InvalidArgumentError,
                       "MirroredStrategy: communication.implementation is NCCL but cross_device_ops is "
                       "kReductionToOneDevice; ask for one of them");
      return CrossDeviceOps::kNcclAllReduce;
    case CommunicationImplementation::kRing:
      DISTRIBUTE_CHECK(first.is_cpu(), InvalidArgumentError, "MirroredStrategy: communication.implementation is RING "
                       "(through host memory) but the replicas run on ", first.short_name(),
                       "; use kAuto or kNccl for GPUs");
      DISTRIBUTE_CHECK(requested == CrossDeviceOps::kAuto, InvalidArgumentError,
                       "MirroredStrategy: communication.implementation is RING but cross_device_ops is not kAuto; "
                       "ask for one of them");
      return CrossDeviceOps::kAuto;
  }
  return requested;
}

}  // namespace

Backend choose_backend(CrossDeviceOps requested, CommunicationImplementation implementation,
                       std::span<const Device> devices, std::span<const int> physical, bool nccl_built) {
  requested = apply_implementation(requested, implementation, devices[0]);
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
