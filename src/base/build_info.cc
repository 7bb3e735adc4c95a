// build_info(): the version and the backends compiled in.
#include "distribute/version.h"

namespace distribute {

std::string build_info() {
  return std::string("distribute ") + DISTRIBUTE_VERSION_STRING + " (cpu; cuda: " +
         (DISTRIBUTE_HAS_CUDA ? "yes" : "no") + "; nccl: " + (DISTRIBUTE_HAS_NCCL ? "yes" : "no") + ")";
}

}  // namespace distribute
