// CUDA errors to typed errors.
#include "device/cuda/cuda_error.h"

#include "distribute/errors.h"

namespace distribute::detail::gpu {

absl::StatusCode cuda_error_code(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return absl::StatusCode::kOk;
    case cudaErrorMemoryAllocation: return absl::StatusCode::kResourceExhausted;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCudartUnloading: return absl::StatusCode::kUnavailable;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection: return absl::StatusCode::kInvalidArgument;
    default: return absl::StatusCode::kInternal;
  }
}

std::string cuda_error_message(cudaError_t error, const std::string& what) {
  std::string message = absl::StrCat(what, ": CUDA error ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  // Errors from a kernel are sticky: the device's context is unusable for the rest of the process.
  if (error == cudaErrorIllegalAddress || error == cudaErrorLaunchFailure || error == cudaErrorAssert) {
    absl::StrAppend(&message, "; the GPU context is now unusable, restart the process");
  }
  return message;
}

void throw_cuda_error(cudaError_t error, const std::string& what) {
  throw_status(absl::Status(cuda_error_code(error), cuda_error_message(error, what)));
}

}  // namespace distribute::detail::gpu
