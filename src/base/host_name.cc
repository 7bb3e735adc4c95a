#include "base/host_name.h"

#include <unistd.h>

#include <array>

namespace distribute::detail {

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "unknown host";
  return name.data();
}

}  // namespace distribute::detail
