// Argument checks for public entry points. The condition is evaluated once; the message parts are
// evaluated (and concatenated with absl::StrCat) only when the check fails, so a check costs one
// branch on the hot path.
#pragma once

#include "absl/strings/str_cat.h"
#include "distribute/errors.h"

// Throws ErrorType(StrCat(message parts...)) unless cond holds.
#define DISTRIBUTE_CHECK(cond, ErrorType, ...)                         \
  do {                                                                 \
    if (!(cond)) [[unlikely]] {                                        \
      throw ErrorType(::absl::StrCat(__VA_ARGS__));                    \
    }                                                                  \
  } while (false)
