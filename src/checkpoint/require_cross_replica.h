// The context every checkpoint operation runs in: cross-replica (in scope, or outside
// Strategy::run), where a save reads whole values and a restore assigns every component.
#pragma once

#include "absl/strings/str_cat.h"
#include "distribute/errors.h"
#include "distribute/strategy/context.h"

namespace distribute::detail {

// FailedPreconditionError naming `method` inside a replica's fn, then telling where it belongs.
inline void require_cross_replica(
    const char* method,
    const char* where = "save and restore in cross-replica context (in scope or outside Strategy::run)") {
  if (get_replica_context() != nullptr && has_strategy()) {
    throw FailedPreconditionError(absl::StrCat(method, ": called inside a replica's fn; ", where));
  }
}

}  // namespace distribute::detail
