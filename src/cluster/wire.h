// distribute::cluster: the two wire formats of what crosses between workers apart from data: values
// of any size (every worker's size first, then the bytes, padded to the longest) and errors (a
// status code, the replica that raised it, the message). Every step that exchanges such things
// (the vote's descriptions, the chief's values and outcome, the input's reports) uses these, so a
// worker decodes what any other encoded.
#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace distribute::cluster {

// One exchange of fixed-size messages on a channel: sends `mine` to every worker and receives
// worker w's bytes (of mine.size()) into all[w * mine.size(), ...). Returns the workers whose
// bytes had not come in time.
using FixedExchange = absl::FunctionRef<std::vector<int>(std::span<const std::byte> mine, std::span<std::byte> all)>;

// Every worker's `mine`, of any size, into all[w], over two fixed-size exchanges. Returns the
// workers whose bytes had not come in time (then `all` is not filled).
std::vector<int> exchange_sized(FixedExchange exchange, const std::string& mine, int num_workers,
                                std::vector<std::string>& all);

// An error as it crosses: the code of a distribute::Error (`otherwise` for any other exception),
// the global id of the replica that raised it (-1: none in particular) and its message. A null
// error encodes as OK.
std::string encode_error(const std::exception_ptr& error, int replica, absl::StatusCode otherwise);
struct WireError {
  absl::StatusCode code = absl::StatusCode::kOk;
  int replica = -1;
  std::string message;
};
// Nothing when `bytes` is not an encoded error.
std::optional<WireError> decode_error(absl::string_view bytes);

}  // namespace distribute::cluster
