// DLPack interop: tensors handed between this library and any framework that speaks DLPack (the
// common in-memory tensor struct of PyTorch, TVM, CuPy, JAX, MXNet...), both ways, without a
// copy. The struct is DLPack's own (<dlpack/dlpack.h>, Debian's libdlpack-dev); this header only
// names it, so a program includes dlpack.h itself where it reads the fields.
//
// Ownership follows DLPack's rule: whoever holds a DLManagedTensor calls its deleter once, when
// done with the memory.
//   - from_dlpack(managed) takes it over: the deleter runs when the last tensor sharing the memory
//     goes. When it throws, nothing was taken: the caller still owns `managed`.
//   - to_dlpack(tensor) gives one away: it keeps the tensor's memory alive until the consumer calls
//     its deleter.
// Host memory only in this version (kDLCPU, and kDLCUDAHost, pinned host memory), compact
// row-major layout, and the dtypes of DType.
#pragma once

#include "distribute/device/tensor.h"

struct DLManagedTensor;

namespace distribute {

// A tensor of the memory `managed` describes, with its dtype and shape, on the calling replica's
// CPU device (CPU:0 outside a replica's function). Takes over `managed` on success.
// InvalidArgumentError for a null pointer, a dtype DType lacks (named, with what to convert to), a
// vector type (lanes > 1), negative sizes, strides that are not compact row-major (the fix:
// make the producer's tensor contiguous first); UnimplementedError for memory on another device
// type.
Tensor from_dlpack(DLManagedTensor* managed);

// A DLManagedTensor viewing `tensor`'s memory (compact row-major, strides null), holding a
// reference to it until its deleter is called. FailedPreconditionError for an undefined tensor,
// UnimplementedError for one in GPU memory.
DLManagedTensor* to_dlpack(const Tensor& tensor);

}  // namespace distribute
