// NCCL results to typed errors, with NCCL's own account of the failure.
#include "collective/nccl/nccl_error.h"

#include "absl/strings/str_cat.h"
#include "distribute/errors.h"

namespace distribute::collective::nccl {

absl::StatusCode nccl_error_code(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return absl::StatusCode::kOk;
    case ncclInvalidArgument: return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage: return absl::StatusCode::kFailedPrecondition;
    case ncclSystemError:
    case ncclRemoteError: return absl::StatusCode::kUnavailable;
    default: return absl::StatusCode::kInternal;
  }
}

std::string nccl_error_message(ncclResult_t result, ncclComm_t comm, const std::string& what) {
  const char* last = ncclGetLastError(comm);
  return absl::StrCat(what, ": NCCL error ", static_cast<int>(result), " (", ncclGetErrorString(result), ")",
                      last != nullptr && *last != '\0' ? absl::StrCat("; NCCL says: ", last) : std::string());
}

void throw_nccl_error(ncclResult_t result, ncclComm_t comm, const std::string& what) {
  throw_status(absl::Status(nccl_error_code(result), nccl_error_message(result, comm, what)));
}

}  // namespace distribute::collective::nccl
