// distribute::detail::gpu: the kernels of NCCL's compressed all_reduce and reduce_scatter
// (CommunicationOptions::compression). Each rank narrows its float32 values to 16 bits in one slot
// per destination shard (the shards of shard_of), the ranks exchange slots, each adds the
// slots it received for its own shard to its own float32 values in float32, in rank order, and
// rounds that sum once more; the rounded sums are what every rank gets back. The roundings are
// those of collective::narrow on the host (to nearest even). This header is shared with nvcc, so
// it includes no library headers.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace distribute::detail::gpu {

enum class WireFormat : int { kBfloat16, kFloat16 };

// slots[p * slot + k] = `in`[shard_of(count, n, p).begin + k] rounded, for each shard p but rank
// `self`'s own (which it adds unrounded); sets *overflow to 1 when a finite value rounds to inf.
cudaError_t launch_narrow_into_slots(WireFormat format, const float* in, std::int64_t count, int n, int self,
                                     std::int64_t slot, std::uint16_t* slots, int* overflow, cudaStream_t stream);

// For k < length: sum = the slots' values received[p * slot + k] widened, with `own`[k] in place
// of rank `self`'s, added in rank order in float32; out16[k] = sum rounded (overflow as above),
// and, when out32 is not null, out32[k] = out16[k] widened, divided by `divide_by`.
cudaError_t launch_sum_slots(WireFormat format, const std::uint16_t* received, int n, int self, std::int64_t slot,
                             const float* own, std::int64_t length, std::uint16_t* out16, float* out32,
                             std::int64_t divide_by, int* overflow, cudaStream_t stream);

// out[i] = slots[p * slot + k] widened, divided by `divide_by`, where element i is element k of
// shard p.
cudaError_t launch_widen_from_slots(WireFormat format, const std::uint16_t* slots, std::int64_t count, int n,
                                    std::int64_t slot, float* out, std::int64_t divide_by, cudaStream_t stream);

}  // namespace distribute::detail::gpu
