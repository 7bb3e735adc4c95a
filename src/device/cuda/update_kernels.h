// distribute::detail::gpu: the element-wise updates of variables on GPUs - subtraction for
// assign_sub, and the optimizers' steps (SGD with or without momentum, Adam) in the same formulas
// and operation order as their host loops. Shared with nvcc, so it includes no library headers.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "device/cuda/reduce_kernel.h"

namespace distribute::detail::gpu {

// Enqueues dst[k] -= src[k] on `stream` (float16 and bfloat16 through float). Returns the
// launch's error.
cudaError_t launch_subtract(KernelDType dtype, void* dst, const void* src, std::int64_t count, cudaStream_t stream);

// Enqueues one SGD step on float32 or float64 buffers: without `m`, w -= lr * g; with it,
// m = momentum * m - lr * g, then w += m (or, Nesterov, w += momentum * m - lr * g).
cudaError_t launch_sgd(KernelDType dtype, void* w, const void* g, void* m, std::int64_t count, double lr,
                       double momentum, bool nesterov, cudaStream_t stream);

// Enqueues one Adam step of step number t = *steps_before + 1, read on the device (the optimizer's
// step count stays there): alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) in double, then
// m += (g - m) * (1 - beta_1), v += (g * g - v) * (1 - beta_2), w -= m * alpha / (sqrt(v) + epsilon).
cudaError_t launch_adam(KernelDType dtype, void* w, const void* g, void* m, void* v, std::int64_t count,
                        const std::int64_t* steps_before, double learning_rate, double beta_1, double beta_2,
                        double epsilon, cudaStream_t stream);

// Enqueues *counter += 1 (the optimizer's step count, which stays on the device).
cudaError_t launch_increment(std::int64_t* counter, cudaStream_t stream);

}  // namespace distribute::detail::gpu
