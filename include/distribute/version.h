// Version and build information: which backends this build of distribute contains.
#pragma once

#include <string>

#include "distribute/config.h"

namespace distribute {

// One line naming the version and the backends built in, e.g. "distribute 0.1.0 (cpu; cuda: no; nccl: no)".
std::string build_info();

}  // namespace distribute
