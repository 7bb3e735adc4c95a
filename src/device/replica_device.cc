// ReplicaDevice for host replicas, and waiting for a replica's device work.
#include "device/replica_device.h"

#include <cstring>

#include "absl/strings/str_cat.h"

#include "device/kernels.h"
#include "distribute/errors.h"

namespace distribute::detail {
namespace {

// Host memory is one space: every replica reads every other's buffers, and work is done when
// issued, so marks and waits are empty and the barriers of the backends order the replicas.
class HostReplicaDevice final : public ReplicaDevice {
 public:
  explicit HostReplicaDevice(const Device& device) : ReplicaDevice(device, -1) {}

  void copy(void* dst, const void* src, std::size_t nbytes) override {
    if (nbytes != 0 && dst != src) std::memcpy(dst, src, nbytes);
  }

  void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t row_bytes,
                 std::size_t rows) override {
    for (std::size_t i = 0; i < rows; ++i) {
      copy(static_cast<char*>(dst) + i * dst_pitch, static_cast<const char*>(src) + i * src_pitch, row_bytes);
    }
  }

  void reduce(DType dtype, ReduceOp op, std::span<const void* const> inputs, void* out, std::int64_t count,
              std::int64_t mean_denominator) override {
    detail::reduce_buffers(dtype, op, inputs, out, count, mean_denominator);
  }
};

}  // namespace

void wait_for_device_work(ReplicaDevice& device, int rank, std::chrono::duration<double> timeout,
                          const std::function<bool()>& cancelled, const std::string& what) {
  const ReplicaDevice::SyncResult result = device.synchronize(deadline_after(timeout), cancelled);
  if (result == ReplicaDevice::SyncResult::kDone) return;
  if (result == ReplicaDevice::SyncResult::kCancelled) {
    throw AbortedError(absl::StrCat("replica ", rank, " stopped waiting for its work on ", device.device().short_name(),
                                    " before ", what, ": another replica failed"));
  }
  throw DeadlineExceededError(absl::StrCat("timed out after ", timeout.count(), " s: the work of replica ", rank, " on ",
                                           device.device().short_name(), " did not finish before ", what));
}

std::unique_ptr<ReplicaDevice> ReplicaDevice::create(const Device& device) {
  if (device.is_gpu()) return gpu::create_replica_device(device);
  return std::make_unique<HostReplicaDevice>(device);
}

}  // namespace distribute::detail
