// distribute::detail::gpu: CUDA runtime failures as the library's typed errors. Out of memory is a
// ResourceExhaustedError, a missing driver or device an UnavailableError, a bad pointer or value
// an InvalidArgumentError, anything else an InternalError; the message says what the library was
// doing, then CUDA's name and text for the error.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace distribute::detail::gpu {

absl::StatusCode cuda_error_code(cudaError_t error);
// "<what>: CUDA error cudaErrorMemoryAllocation (out of memory)".
std::string cuda_error_message(cudaError_t error, const std::string& what);
[[noreturn]] void throw_cuda_error(cudaError_t error, const std::string& what);

}  // namespace distribute::detail::gpu

// Evaluates `expr` (a cudaError_t) and throws the typed error, with the message built from the
// remaining arguments only on failure.
#define DISTRIBUTE_CUDA_CHECK(expr, ...)                                                       \
  do {                                                                                         \
    const cudaError_t distribute_cuda_error_ = (expr);                                         \
    if (distribute_cuda_error_ != cudaSuccess) {                                               \
      ::distribute::detail::gpu::throw_cuda_error(distribute_cuda_error_, absl::StrCat(__VA_ARGS__)); \
    }                                                                                          \
  } while (false)
