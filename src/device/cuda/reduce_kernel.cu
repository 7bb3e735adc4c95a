// The GPU reduction kernel over N input buffers, one launch per dtype.
#include "device/cuda/reduce_kernel.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/cuda/grid.h"

namespace distribute::detail::gpu {
namespace {

// Inputs travel in the kernel's parameters; longer lists are folded in passes through `out`.
constexpr int kMaxInputs = 16;
struct InputList {
  const void* data[kMaxInputs];
};

template <class T> struct Accumulator { using type = T; };
template <> struct Accumulator<__half> { using type = float; };
template <> struct Accumulator<__nv_bfloat16> { using type = float; };

template <class T> __device__ typename Accumulator<T>::type widen(T v) { return v; }
template <> __device__ float widen<__half>(__half v) { return __half2float(v); }
template <> __device__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ T narrow(typename Accumulator<T>::type v) { return v; }
template <> __device__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class T>
__global__ void reduce_kernel(InputList inputs, int n, T* out, std::int64_t count, std::int64_t divide_by) {
  using Acc = typename Accumulator<T>::type;
  DISTRIBUTE_FOR_EACH_ELEMENT(k, count) {
    Acc acc = widen(static_cast<const T*>(inputs.data[0])[k]);
    for (int i = 1; i < n; ++i) acc += widen(static_cast<const T*>(inputs.data[i])[k]);
    if (divide_by != 1) acc /= static_cast<Acc>(divide_by);
    out[k] = narrow<T>(acc);
  }
}

template <class T>
cudaError_t launch_typed(bool mean, const void* const* inputs, std::size_t n, T* out, std::int64_t count,
                         std::int64_t mean_denominator, cudaStream_t stream) {
  const unsigned blocks = blocks_for(count);
  std::size_t next = 0;
  while (next < n) {
    InputList list{};
    int k = 0;
    if (next != 0) list.data[k++] = out;  // the running result of the earlier passes
    while (k < kMaxInputs && next < n) list.data[k++] = inputs[next++];
    const std::int64_t divide_by = next == n && mean ? mean_denominator : 1;
    reduce_kernel<T><<<blocks, static_cast<unsigned>(kThreads), 0, stream>>>(list, k, out, count, divide_by);
    if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_reduce(KernelDType dtype, bool mean, const void* const* inputs, std::size_t n, void* out,
                          std::int64_t count, std::int64_t mean_denominator, cudaStream_t stream) {
  if (count == 0 || n == 0) return cudaSuccess;
  switch (dtype) {
    case KernelDType::kFloat32: return launch_typed(mean, inputs, n, static_cast<float*>(out), count, mean_denominator, stream);
    case KernelDType::kFloat64: return launch_typed(mean, inputs, n, static_cast<double*>(out), count, mean_denominator, stream);
    case KernelDType::kInt32:
      return launch_typed(mean, inputs, n, static_cast<std::int32_t*>(out), count, mean_denominator, stream);
    case KernelDType::kInt64:
      return launch_typed(mean, inputs, n, static_cast<std::int64_t*>(out), count, mean_denominator, stream);
    case KernelDType::kFloat16: return launch_typed(mean, inputs, n, static_cast<__half*>(out), count, mean_denominator, stream);
    case KernelDType::kBFloat16:
      return launch_typed(mean, inputs, n, static_cast<__nv_bfloat16*>(out), count, mean_denominator, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace distribute::detail::gpu
