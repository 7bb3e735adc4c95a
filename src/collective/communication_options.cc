// CommunicationOptions: merging a call's options with a strategy's defaults, and names.
#include "distribute/collective/communication_options.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "distribute/check.h"

namespace distribute {

namespace detail {

// A negative timeout would read as "no timeout" and a NaN one as a deadline already past: both
// are refused.
void check_timeout(std::chrono::duration<double> timeout, const char* field, const char* zero_means) {
  const double seconds = timeout.count();
  DISTRIBUTE_CHECK(std::isfinite(seconds) && seconds >= 0.0, InvalidArgumentError, field, " is ", seconds,
                   " s; it must be a finite number of seconds >= 0 (0: ", zero_means, ")");
}

}  // namespace detail

CommunicationOptions CommunicationOptions::merged_with(const CommunicationOptions& defaults) const {
  // The defaults are a strategy's, checked when it was built.
  detail::check_timeout(timeout, "CommunicationOptions::timeout", "the strategy's timeout");
  CommunicationOptions out = *this;
  if (out.bytes_per_pack == 0) out.bytes_per_pack = defaults.bytes_per_pack;
  if (out.timeout.count() == 0) out.timeout = defaults.timeout;
  if (out.implementation == CommunicationImplementation::kAuto) out.implementation = defaults.implementation;
  if (out.compression == Compression::kNone) out.compression = defaults.compression;
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

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::kNone: return "NONE";
    case Compression::kBfloat16: return "BF16";
    case Compression::kFloat16: return "FP16";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, Compression compression) { return os << compression_name(compression); }

Compression parse_compression(std::string_view name) {
  for (const Compression c : {Compression::kNone, Compression::kBfloat16, Compression::kFloat16}) {
    if (absl::EqualsIgnoreCase(absl::string_view(name.data(), name.size()), compression_name(c))) return c;
  }
  throw InvalidArgumentError(absl::StrCat("unknown compression '", std::string(name), "'; use none, bf16 or fp16"));
}

}  // namespace distribute
