// distribute::detail: the status code an exception stands for, where a failure crosses to another
// worker as a code and a message (and is thrown there again, of the same type).
#pragma once

#include <exception>

#include "absl/status/status.h"

namespace distribute::detail {

// The code of a distribute::Error; `otherwise` for any other exception.
absl::StatusCode status_code_of(const std::exception_ptr& error, absl::StatusCode otherwise);

}  // namespace distribute::detail
