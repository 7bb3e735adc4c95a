// The GPU kernels behind variable updates and optimizer steps; see update_kernels.h.
#include "device/cuda/update_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/cuda/grid.h"

namespace distribute::detail::gpu {
namespace {

template <class T>
__global__ void subtract_kernel(T* dst, const T* src, std::int64_t count) {
  DISTRIBUTE_FOR_EACH_ELEMENT(k, count) { dst[k] = dst[k] - src[k]; }
}

__global__ void subtract_half_kernel(__half* dst, const __half* src, std::int64_t count) {
  DISTRIBUTE_FOR_EACH_ELEMENT(k, count) { dst[k] = __float2half_rn(__half2float(dst[k]) - __half2float(src[k])); }
}

__global__ void subtract_bfloat16_kernel(__nv_bfloat16* dst, const __nv_bfloat16* src, std::int64_t count) {
  DISTRIBUTE_FOR_EACH_ELEMENT(k, count) {
    dst[k] = __float2bfloat16_rn(__bfloat162float(dst[k]) - __bfloat162float(src[k]));
  }
}

// The host loops round every operation (no fused multiply-adds); __fmul_rn and friends keep the
// device from contracting either, so both give the same bits.
__device__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ double sub(double a, double b) { return __dsub_rn(a, b); }

template <class T>
__global__ void sgd_kernel(T* w, const T* g, std::int64_t count, T lr) {
  DISTRIBUTE_FOR_EACH_ELEMENT(k, count) { w[k] = sub(w[k], mul(lr, g[k])); }
}

template <class T>
__global__ void sgd_momentum_kernel(T* w, const T* g, T* m, std::int64_t count, T lr, T mu, bool nesterov) {
  DISTRIBUTE_FOR_EACH_ELEMENT(k, count) {
    const T step = mul(lr, g[k]);
    const T mk = sub(mul(mu, m[k]), step);
    m[k] = mk;
    w[k] = add(w[k], nesterov ? sub(mul(mu, mk), step) : mk);
  }
}

// The bias-corrected rate of step *steps_before + 1, as the host computes it (each thread works it
// out: a few dozen double operations against a pass over memory, and no second kernel).
__device__ double adam_alpha(const std::int64_t* steps_before, double lr, double beta_1, double beta_2) {
  const double t = static_cast<double>(*steps_before + 1);
  return __ddiv_rn(__dmul_rn(lr, __dsqrt_rn(__dsub_rn(1.0, pow(beta_2, t)))), __dsub_rn(1.0, pow(beta_1, t)));
}

template <class T>
__global__ void adam_kernel(T* w, const T* g, T* m, T* v, std::int64_t count, const std::int64_t* steps_before,
                            double lr, double beta_1, double beta_2, T one_minus_b1, T one_minus_b2, T eps) {
  const T alpha = static_cast<T>(adam_alpha(steps_before, lr, beta_1, beta_2));
  DISTRIBUTE_FOR_EACH_ELEMENT(k, count) {
    const T gk = g[k];
    const T mk = add(m[k], mul(sub(gk, m[k]), one_minus_b1));
    const T vk = add(v[k], mul(sub(mul(gk, gk), v[k]), one_minus_b2));
    m[k] = mk;
    v[k] = vk;
    w[k] = sub(w[k], mul(mk, alpha) / add(sqrt(vk), eps));
  }
}

__global__ void increment_kernel(std::int64_t* counter) { *counter += 1; }


template <class T>
cudaError_t launch_subtract_typed(void* dst, const void* src, std::int64_t count, cudaStream_t stream) {
  subtract_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src), count);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_sgd_typed(void* w, const void* g, void* m, std::int64_t count, double lr, double momentum,
                             bool nesterov, cudaStream_t stream) {
  if (m == nullptr) {
    sgd_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<T*>(w), static_cast<const T*>(g), count,
                                                              static_cast<T>(lr));
  } else {
    sgd_momentum_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<T*>(w), static_cast<const T*>(g), static_cast<T*>(m), count, static_cast<T>(lr),
        static_cast<T>(momentum), nesterov);
  }
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_adam_typed(void* w, const void* g, void* m, void* v, std::int64_t count,
                              const std::int64_t* steps_before, double lr, double beta_1, double beta_2,
                              double epsilon, cudaStream_t stream) {
  adam_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(
      static_cast<T*>(w), static_cast<const T*>(g), static_cast<T*>(m), static_cast<T*>(v), count, steps_before, lr,
      beta_1, beta_2, static_cast<T>(1.0 - beta_1), static_cast<T>(1.0 - beta_2), static_cast<T>(epsilon));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_subtract(KernelDType dtype, void* dst, const void* src, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (dtype) {
    case KernelDType::kFloat32: return launch_subtract_typed<float>(dst, src, count, stream);
    case KernelDType::kFloat64: return launch_subtract_typed<double>(dst, src, count, stream);
    case KernelDType::kInt32: return launch_subtract_typed<std::int32_t>(dst, src, count, stream);
    case KernelDType::kInt64: return launch_subtract_typed<std::int64_t>(dst, src, count, stream);
    case KernelDType::kFloat16:
      subtract_half_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__half*>(dst),
                                                                      static_cast<const __half*>(src), count);
      return cudaGetLastError();
    case KernelDType::kBFloat16:
      subtract_bfloat16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
          static_cast<__nv_bfloat16*>(dst), static_cast<const __nv_bfloat16*>(src), count);
      return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_sgd(KernelDType dtype, void* w, const void* g, void* m, std::int64_t count, double lr,
                       double momentum, bool nesterov, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (dtype) {
    case KernelDType::kFloat32: return launch_sgd_typed<float>(w, g, m, count, lr, momentum, nesterov, stream);
    case KernelDType::kFloat64: return launch_sgd_typed<double>(w, g, m, count, lr, momentum, nesterov, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_adam(KernelDType dtype, void* w, const void* g, void* m, void* v, std::int64_t count,
                        const std::int64_t* steps_before, double learning_rate, double beta_1, double beta_2,
                        double epsilon, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (dtype) {
    case KernelDType::kFloat32:
      return launch_adam_typed<float>(w, g, m, v, count, steps_before, learning_rate, beta_1, beta_2, epsilon, stream);
    case KernelDType::kFloat64:
      return launch_adam_typed<double>(w, g, m, v, count, steps_before, learning_rate, beta_1, beta_2, epsilon,
                                       stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_increment(std::int64_t* counter, cudaStream_t stream) {
  increment_kernel<<<1, 1, 0, stream>>>(counter);
  return cudaGetLastError();
}

}  // namespace distribute::detail::gpu
