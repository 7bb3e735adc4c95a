// The GPU runtime of a build without CUDA: no GPU is visible, and anything that would touch one
// says how to get a build that can.
#include "absl/strings/str_cat.h"
#include "device/gpu_runtime.h"
#include "device/replica_device.h"
#include "distribute/device/gpu.h"
#include "distribute/errors.h"

namespace distribute::detail::gpu {
namespace {

[[noreturn]] void no_backend(const std::string& what) {
  throw UnimplementedError(absl::StrCat(
      what, ": this build of distribute has no GPU backend (reconfigure with -DDISTRIBUTE_WITH_CUDA=ON)"));
}

}  // namespace

bool built() { return false; }
int physical_device_count() { return 0; }
std::string unavailable_reason() { return "this build of distribute has no GPU backend"; }
std::string pci_bus_id(int physical) { no_backend(absl::StrCat("cannot query GPU ", physical)); }

StorageRef allocate(const Device& gpu, std::size_t) {
  no_backend(absl::StrCat("cannot allocate on ", gpu.short_name()));
}

void copy(void*, const Device& dst_device, const void*, const Device& src_device, std::size_t) {
  no_backend(absl::StrCat("cannot copy from ", src_device.short_name(), " to ", dst_device.short_name()));
}

void fill_zero(void*, const Device& gpu, std::size_t) { no_backend(absl::StrCat("cannot fill ", gpu.short_name())); }

void reduce(DType, ReduceOp, std::span<const void* const>, void*, std::int64_t, std::int64_t, const Device& gpu) {
  no_backend(absl::StrCat("cannot reduce on ", gpu.short_name()));
}

void subtract(DType, void*, const void*, std::int64_t, const Device& gpu) {
  no_backend(absl::StrCat("cannot update on ", gpu.short_name()));
}

void sgd_step(DType, void*, const void*, void*, std::int64_t, double, double, bool, const Device& gpu) {
  no_backend(absl::StrCat("cannot update on ", gpu.short_name()));
}

void adam_step(DType, void*, const void*, void*, void*, std::int64_t, const std::int64_t*, double, double, double,
               double, const Device& gpu) {
  no_backend(absl::StrCat("cannot update on ", gpu.short_name()));
}

void increment(std::int64_t*, const Device& gpu) { no_backend(absl::StrCat("cannot update on ", gpu.short_name())); }

void synchronize_bound_stream() {}

std::unique_ptr<ReplicaDevice> create_replica_device(const Device& gpu) {
  no_backend(absl::StrCat("cannot run a replica on ", gpu.short_name()));
}

}  // namespace distribute::detail::gpu

namespace distribute::cuda {

CUstream_st* current_stream() { return nullptr; }

}  // namespace distribute::cuda
