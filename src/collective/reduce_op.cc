#include "distribute/collective/reduce_op.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "distribute/collective/communication_options.h"
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

CommunicationOptions CommunicationOptions::merged_with(const CommunicationOptions& defaults) const {
  CommunicationOptions out = *this;
  if (out.bytes_per_pack == 0) out.bytes_per_pack = defaults.bytes_per_pack;
  if (out.timeout.count() <= 0) out.timeout = defaults.timeout;
  if (out.implementation == CommunicationImplementation::kAuto) out.implementation = defaults.implementation;
  return out;
}

const char* implementation_name(CommunicationImplementation implementation) {
  switch (implementation) {
    case CommunicationImplementation::kAuto: return "AUTO";
    case CommunicationImplementation::kRing: return "RING";
    case CommunicationImplementation::kNccl: return "NCCL";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, CommunicationImplementation implementation) {
  return os << implementation_name(implementation);
}

}  // namespace distribute
