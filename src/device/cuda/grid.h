// distribute::detail::gpu: the launch shape of the library's element-wise kernels (nvcc only): 256
// threads a block, at most 4096 blocks, each thread taking every stride-th element, so that one
// launch covers any count.
#pragma once

#include <cstdint>

namespace distribute::detail::gpu {

inline constexpr std::int64_t kThreads = 256;
inline constexpr std::int64_t kMaxBlocks = 4096;

inline unsigned blocks_for(std::int64_t count) {
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

}  // namespace distribute::detail::gpu

// Grid-stride loop of `k` over [0, count), inside a kernel.
#define DISTRIBUTE_FOR_EACH_ELEMENT(k, count)                                                         \
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < (count); \
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
