// distribute::detail: this machine's host name, as the timeline labels a worker's events and the
// multi-worker backends tell the workers which of them share a machine.
#pragma once

#include <string>

namespace distribute::detail {

// gethostname's; "unknown host" where it fails.
std::string host_name();

}  // namespace distribute::detail
