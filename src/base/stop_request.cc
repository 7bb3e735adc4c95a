// The process's stop request (base/stop_request.h).
#include "base/stop_request.h"

namespace distribute::detail::stop_request {

std::atomic<bool> raised{false};

}  // namespace distribute::detail::stop_request
