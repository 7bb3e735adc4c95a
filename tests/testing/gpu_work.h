// Kernels that stand in for a replica's own GPU work in the GPU tests and benchmarks: fills that
// come late, work of a known length, and watchers that see from another stream when a value
// arrives. Waits are bounded by the GPU's global timer, so that a missing dependency fails a test
// instead of hanging it. Shared with nvcc: no library headers.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace distribute::testing::gpu {

// After `delay_ns` of spinning, data[k] = value for k < count.
cudaError_t fill_late(float* data, std::int64_t count, float value, std::int64_t delay_ns, cudaStream_t stream);
// Busy work on every multiprocessor for about `iterations` dependent multiply-adds per element of
// `data` (count elements), which it updates; the stand-in for a layer's computation.
cudaError_t compute(float* data, std::int64_t count, int iterations, cudaStream_t stream);
// Spins until *watched == expected (then *seen = 1) or `timeout_ns` passes (*seen stays).
cudaError_t watch_for(const float* watched, float expected, int* seen, std::int64_t timeout_ns, cudaStream_t stream);
// Spins until *flag != 0 or `timeout_ns` passes.
cudaError_t wait_for_flag(const int* flag, std::int64_t timeout_ns, cudaStream_t stream);

}  // namespace distribute::testing::gpu
