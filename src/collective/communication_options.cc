// CommunicationOptions: merging a call's options with a strategy's defaults, and names.
#include "distribute/collective/communication_options.h"

namespace distribute {

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
