// LibTorch tensors and this library's tensors, one memory: from_torch and to_torch share the
// storage both ways (never a copy) and keep it alive as long as either side holds it, so a
// gradient LibTorch's backward pass wrote goes into a collective as it is, and a collective's
// result is read by LibTorch where it lies. Part of the distribute::torch component
// (find_package(distribute CONFIG COMPONENTS torch)).
//
// Rules:
//   - host memory only: Debian's LibTorch (1.13) is built without CUDA;
//   - dtypes: float32, float64, float16, bfloat16, int32, int64 both ways (kFloat, kDouble, kHalf,
//     kBFloat16, kInt, kLong); any other is an InvalidArgumentError naming it;
//   - a LibTorch tensor must be dense and contiguous (a transpose or a strided slice is not):
//     call .contiguous() first, which copies, so the copy is the caller's choice, never ours;
//   - writes through either side are seen by the other; LibTorch's autograd does not see the
//     writes made through a Tensor (as with any in-place write under torch::NoGradGuard).
#pragma once

#include "distribute/config.h"
#if !DISTRIBUTE_HAS_TORCH
#error "this build of distribute has no torch component: install LibTorch (Debian: libtorch-dev), configure distribute with -DDISTRIBUTE_WITH_TORCH=ON, reinstall it, and link distribute::torch"
#endif

#include <ATen/core/Tensor.h>

#include "distribute/device/tensor.h"

namespace distribute {

// A Tensor over `tensor`'s elements, holding a reference to its storage, on the calling
// replica's CPU device (CPU:0 outside a replica's function: default_host_device()).
// InvalidArgumentError for an undefined, sparse, non-contiguous or unsupported-dtype tensor;
// UnimplementedError for one not in host memory.
Tensor from_torch(const at::Tensor& tensor);

// An at::Tensor over `tensor`'s elements, holding a reference to its memory, with its dtype and
// shape (a rank-0 tensor gives a 0-dimensional one). FailedPreconditionError for an undefined
// tensor, UnimplementedError for one in GPU memory.
at::Tensor to_torch(const Tensor& tensor);

}  // namespace distribute
