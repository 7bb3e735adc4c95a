// distribute::collective::nccl: NCCL failures as the library's typed errors. A bad argument is an
// InvalidArgumentError, misuse a FailedPreconditionError, a system or remote failure an
// UnavailableError, the rest InternalError; the message says what the library was doing, then
// NCCL's name and text for the result and ncclGetLastError's detail.
#pragma once

#include <string>

#include <nccl.h>

#include "absl/status/status.h"

namespace distribute::collective::nccl {

absl::StatusCode nccl_error_code(ncclResult_t result);
std::string nccl_error_message(ncclResult_t result, ncclComm_t comm, const std::string& what);
[[noreturn]] void throw_nccl_error(ncclResult_t result, ncclComm_t comm, const std::string& what);

}  // namespace distribute::collective::nccl
