// The stand-in GPU work of tests/testing/gpu_work.h.
#include "testing/gpu_work.h"

namespace distribute::testing::gpu {
namespace {

__device__ std::int64_t now_ns() {
  std::int64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin(std::int64_t delay_ns) {
  const std::int64_t until = now_ns() + delay_ns;
  while (now_ns() < until) {
  }
}

__global__ void fill(float* data, std::int64_t count, float value) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count; k += stride) {
    data[k] = value;
  }
}

__global__ void multiply_add(float* data, std::int64_t count, int iterations) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count; k += stride) {
    float x = data[k];
    for (int i = 0; i < iterations; ++i) x = x * 0.999999f + 1e-7f;
    data[k] = x;
  }
}

__global__ void watch(const volatile float* watched, float expected, int* seen, std::int64_t timeout_ns) {
  const std::int64_t until = now_ns() + timeout_ns;
  while (now_ns() < until) {
    if (*watched == expected) {
      *seen = 1;
      __threadfence_system();
      return;
    }
  }
}

__global__ void wait_flag(const volatile int* flag, std::int64_t timeout_ns) {
  const std::int64_t until = now_ns() + timeout_ns;
  while (now_ns() < until && *flag == 0) {
  }
}

unsigned blocks_for(std::int64_t count) {
  const std::int64_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}

}  // namespace

cudaError_t fill_late(float* data, std::int64_t count, float value, std::int64_t delay_ns, cudaStream_t stream) {
  spin<<<1, 1, 0, stream>>>(delay_ns);
  if (count > 0) fill<<<blocks_for(count), 256, 0, stream>>>(data, count, value);
  return cudaGetLastError();
}

cudaError_t compute(float* data, std::int64_t count, int iterations, cudaStream_t stream) {
  // One element per thread: short blocks, which leave multiprocessors to other streams' kernels
  // as they end, as a layer's many kernels do.
  const auto blocks = static_cast<unsigned>((count + 255) / 256);
  if (count > 0) multiply_add<<<blocks, 256, 0, stream>>>(data, count, iterations);
  return cudaGetLastError();
}

cudaError_t watch_for(const float* watched, float expected, int* seen, std::int64_t timeout_ns, cudaStream_t stream) {
  watch<<<1, 1, 0, stream>>>(watched, expected, seen, timeout_ns);
  return cudaGetLastError();
}

cudaError_t wait_for_flag(const int* flag, std::int64_t timeout_ns, cudaStream_t stream) {
  wait_flag<<<1, 1, 0, stream>>>(flag, timeout_ns);
  return cudaGetLastError();
}

}  // namespace distribute::testing::gpu
