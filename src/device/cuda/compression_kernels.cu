// The 16-bit wire kernels of NCCL's compressed collectives.
#include "device/cuda/compression_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/cuda/grid.h"

namespace distribute::detail::gpu {
namespace {

// The same rounding as collective::narrow: to nearest even, with infs and NaNs kept.
template <WireFormat F>
__device__ std::uint16_t narrow(float v) {
  if constexpr (F == WireFormat::kBfloat16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  } else {
    return __half_as_ushort(__float2half_rn(v));
  }
}

template <WireFormat F>
__device__ float widen(std::uint16_t v) {
  if constexpr (F == WireFormat::kBfloat16) {
    return __bfloat162float(__ushort_as_bfloat16(v));
  } else {
    return __half2float(__ushort_as_half(v));
  }
}

// Rounds v, and flags a finite value that became inf.
template <WireFormat F>
__device__ std::uint16_t narrow_checked(float v, int* overflow) {
  const std::uint16_t out = narrow<F>(v);
  if (isfinite(v) && isinf(widen<F>(out))) *overflow = 1;
  return out;
}

// Element i's shard and its place there, for shard_of(count, n, p).
struct ShardIndex {
  std::int64_t base, longer, boundary;
  __device__ void locate(std::int64_t i, std::int64_t& shard, std::int64_t& k) const {
    if (i < boundary) {
      shard = i / (base + 1);
      k = i - shard * (base + 1);
    } else {
      shard = longer + (i - boundary) / base;
      k = i - boundary - (shard - longer) * base;
    }
  }
};

ShardIndex shard_index(std::int64_t count, int n) {
  const std::int64_t base = count / n;
  const std::int64_t longer = count % n;
  return ShardIndex{base, longer, longer * (base + 1)};
}

template <WireFormat F>
__global__ void narrow_into_slots(const float* in, std::int64_t count, ShardIndex index, int self, std::int64_t slot,
                                  std::uint16_t* slots, int* overflow) {
  DISTRIBUTE_FOR_EACH_ELEMENT(i, count) {
    std::int64_t shard = 0;
    std::int64_t k = 0;
    index.locate(i, shard, k);
    if (shard != self) slots[shard * slot + k] = narrow_checked<F>(in[i], overflow);
  }
}

template <WireFormat F>
__global__ void sum_slots(const std::uint16_t* received, int n, int self, std::int64_t slot, const float* own,
                          std::int64_t length, std::uint16_t* out16, float* out32, std::int64_t divide_by,
                          int* overflow) {
  DISTRIBUTE_FOR_EACH_ELEMENT(k, length) {
    float sum = 0;
    for (int p = 0; p < n; ++p) sum += p == self ? own[k] : widen<F>(received[p * slot + k]);
    const std::uint16_t rounded = narrow_checked<F>(sum, overflow);
    out16[k] = rounded;
    if (out32 != nullptr) {
      float value = widen<F>(rounded);
      if (divide_by != 1) value /= static_cast<float>(divide_by);
      out32[k] = value;
    }
  }
}

template <WireFormat F>
__global__ void widen_from_slots(const std::uint16_t* slots, std::int64_t count, ShardIndex index, std::int64_t slot,
                                 float* out, std::int64_t divide_by) {
  DISTRIBUTE_FOR_EACH_ELEMENT(i, count) {
    std::int64_t shard = 0;
    std::int64_t k = 0;
    index.locate(i, shard, k);
    float value = widen<F>(slots[shard * slot + k]);
    if (divide_by != 1) value /= static_cast<float>(divide_by);
    out[i] = value;
  }
}

}  // namespace

cudaError_t launch_narrow_into_slots(WireFormat format, const float* in, std::int64_t count, int n, int self,
                                     std::int64_t slot, std::uint16_t* slots, int* overflow, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const ShardIndex index = shard_index(count, n);
  if (format == WireFormat::kBfloat16) {
    narrow_into_slots<WireFormat::kBfloat16><<<blocks_for(count), kThreads, 0, stream>>>(in, count, index, self, slot, slots, overflow);
  } else {
    narrow_into_slots<WireFormat::kFloat16><<<blocks_for(count), kThreads, 0, stream>>>(in, count, index, self, slot, slots, overflow);
  }
  return cudaGetLastError();
}

cudaError_t launch_sum_slots(WireFormat format, const std::uint16_t* received, int n, int self, std::int64_t slot,
                             const float* own, std::int64_t length, std::uint16_t* out16, float* out32,
                             std::int64_t divide_by, int* overflow, cudaStream_t stream) {
  if (length == 0) return cudaSuccess;
  if (format == WireFormat::kBfloat16) {
    sum_slots<WireFormat::kBfloat16><<<blocks_for(length), kThreads, 0, stream>>>(received, n, self, slot, own, length,
                                                                                  out16, out32, divide_by, overflow);
  } else {
    sum_slots<WireFormat::kFloat16><<<blocks_for(length), kThreads, 0, stream>>>(received, n, self, slot, own, length,
                                                                                 out16, out32, divide_by, overflow);
  }
  return cudaGetLastError();
}

cudaError_t launch_widen_from_slots(WireFormat format, const std::uint16_t* slots, std::int64_t count, int n,
                                    std::int64_t slot, float* out, std::int64_t divide_by, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const ShardIndex index = shard_index(count, n);
  if (format == WireFormat::kBfloat16) {
    widen_from_slots<WireFormat::kBfloat16><<<blocks_for(count), kThreads, 0, stream>>>(slots, count, index, slot, out, divide_by);
  } else {
    widen_from_slots<WireFormat::kFloat16><<<blocks_for(count), kThreads, 0, stream>>>(slots, count, index, slot, out, divide_by);
  }
  return cudaGetLastError();
}

}  // namespace distribute::detail::gpu
