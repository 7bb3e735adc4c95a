// ReduceOp: parsing and names.
#include "distribute/device/reduce_op.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "distribute/errors.h"

namespace distribute {

ReduceOp parse_reduce_op(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (lower == "sum") return ReduceOp::kSum;
  if (lower == "mean") return ReduceOp::kMean;
  throw InvalidArgumentError(absl::StrCat("unknown reduce op \"", std::string(name),
                                          "\"; use \"SUM\" or \"MEAN\" (any letter case) or ReduceOp::kSum / kMean"));
}

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "SUM" : "MEAN"; }

std::ostream& operator<<(std::ostream& os, ReduceOp op) { return os << reduce_op_name(op); }

}  // namespace distribute
