// distribute::detail::gpu: the element-wise reduction of N device buffers into one, the GPU
// counterpart of detail::reduce_buffers (same rounding: float accumulation for float16 and
// bfloat16, MEAN divides once at the end). This header is shared with nvcc, so it includes no
// library headers: the caller maps DType onto KernelDType and turns the result into an error.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace distribute::detail::gpu {

// The same order as distribute::DType.
enum class KernelDType : int { kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16 };

// Enqueues out[k] = inputs[0][k] + ... + inputs[n-1][k] (divided by mean_denominator when `mean`)
// on `stream`; every pointer is memory of the stream's device and `out` may alias inputs[0].
// Returns the launch's error.
cudaError_t launch_reduce(KernelDType dtype, bool mean, const void* const* inputs, std::size_t n, void* out,
                          std::int64_t count, std::int64_t mean_denominator, cudaStream_t stream);

}  // namespace distribute::detail::gpu
