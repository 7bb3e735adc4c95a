// Communicator: the cross-replica operations every backend starts from.
#include "collective/communicator.h"

#include <vector>

#include "absl/container/inlined_vector.h"
#include "device/gpu_runtime.h"
#include "device/kernels.h"
#include "device/storage.h"
#include "distribute/device/gpu.h"

namespace distribute::collective {
namespace {

// -1 for host memory, else the physical GPU: devices of one memory space read each other's memory.
int memory_space(const Device& device) { return device.is_cpu() ? -1 : physical_gpu_of(device); }

// The values readable where `destination` computes: those already in its memory space as they are,
// the others copied there into `scratch`.
absl::InlinedVector<const void*, 8> values_at(std::span<const DeviceBuffer> values, std::size_t nbytes,
                                              const Device& destination, std::vector<detail::StorageRef>& scratch) {
  const int space = memory_space(destination);
  absl::InlinedVector<const void*, 8> out;
  for (const DeviceBuffer& value : values) {
    if (memory_space(value.device) == space || nbytes == 0) {
      out.push_back(value.data);
      continue;
    }
    scratch.push_back(detail::allocate_storage(destination, nbytes));
    detail::copy_bytes(scratch.back()->data(), destination, value.data, value.device, nbytes);
    out.push_back(scratch.back()->data());
  }
  return out;
}

}  // namespace

void Communicator::reduce_to(ReduceOp op, DType dtype, std::span<const DeviceBuffer> values, std::int64_t count,
                             std::int64_t mean_denominator, void* out, const Device& destination,
                             const CrossReplicaStep& /*step*/) {
  reduce_at_destination(op, dtype, values, count, mean_denominator, out, destination);
}

void Communicator::gather_to(std::span<const DeviceBuffer> values, std::span<const std::int64_t> dims,
                             std::int64_t outer, std::size_t inner_bytes,
                             absl::FunctionRef<void*(std::int64_t total)> output, const Device& destination,
                             const CrossReplicaStep& /*step*/) {
  std::int64_t total = 0;
  for (std::int64_t d : dims) total += d;
  gather_at_destination(values, dims, outer, inner_bytes, output(total), destination);
}

void reduce_at_destination(ReduceOp op, DType dtype, std::span<const DeviceBuffer> values, std::int64_t count,
                           std::int64_t mean_denominator, void* out, const Device& destination) {
  std::vector<detail::StorageRef> scratch;
  const auto inputs = values_at(values, static_cast<std::size_t>(count) * dtype_size(dtype), destination, scratch);
  if (destination.is_cpu()) {
    detail::reduce_buffers(dtype, op, inputs, out, count, mean_denominator);
  } else {
    detail::gpu::reduce(dtype, op, inputs, out, count, mean_denominator, destination);
  }
}

void gather_at_destination(std::span<const DeviceBuffer> values, std::span<const std::int64_t> dims,
                           std::int64_t outer, std::size_t inner_bytes, void* out, const Device& destination) {
  if (destination.is_cpu()) {
    std::vector<detail::StorageRef> scratch;
    absl::InlinedVector<const void*, 8> inputs;
    for (std::size_t r = 0; r < values.size(); ++r) {
      const std::size_t nbytes = static_cast<std::size_t>(outer * dims[r]) * inner_bytes;
      inputs.push_back(values_at(values.subspan(r, 1), nbytes, destination, scratch)[0]);
    }
    detail::concat_buffers(inputs, dims, outer, inner_bytes, out);
    return;
  }
  // On a GPU, each value's rows are copied straight into place, from wherever they are.
  std::int64_t total = 0;
  for (std::int64_t d : dims) total += d;
  const std::size_t out_row = static_cast<std::size_t>(total) * inner_bytes;
  std::size_t column = 0;
  for (std::size_t r = 0; r < values.size(); ++r) {
    const std::size_t width = static_cast<std::size_t>(dims[r]) * inner_bytes;
    for (std::int64_t row = 0; row < outer; ++row) {
      detail::copy_bytes(static_cast<char*>(out) + static_cast<std::size_t>(row) * out_row + column, destination,
                         static_cast<const char*>(values[r].data) + static_cast<std::size_t>(row) * width,
                         values[r].device, width);
    }
    column += width;
  }
}

}  // namespace distribute::collective
