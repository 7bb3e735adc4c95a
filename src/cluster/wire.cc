// The wire formats of values and errors between workers.
#include "cluster/wire.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/error_code.h"
#include "distribute/errors.h"

namespace distribute::cluster {

std::vector<int> exchange_sized(FixedExchange exchange, const std::string& mine, int num_workers,
                                std::vector<std::string>& all) {
  const auto n = static_cast<std::size_t>(num_workers);
  const std::uint64_t size = mine.size();
  std::vector<std::uint64_t> sizes(n);
  if (std::vector<int> missing = exchange(std::as_bytes(std::span(&size, 1)), std::as_writable_bytes(std::span(sizes)));
      !missing.empty()) {
    return missing;
  }
  const std::size_t longest = std::max<std::size_t>(*std::max_element(sizes.begin(), sizes.end()), 1);
  std::string padded = mine;
  padded.resize(longest, '\0');
  std::vector<std::byte> bytes(longest * n);
  if (std::vector<int> missing = exchange(std::as_bytes(std::span(padded)), bytes); !missing.empty()) return missing;
  all.clear();
  for (std::size_t w = 0; w < n; ++w) {
    all.emplace_back(reinterpret_cast<const char*>(bytes.data() + w * longest), sizes[w]);
  }
  return {};
}

std::string encode_error(const std::exception_ptr& error, int replica, absl::StatusCode otherwise) {
  if (!error) return absl::StrCat(static_cast<int>(absl::StatusCode::kOk), "\n", replica, "\n");
  const absl::StatusCode code = detail::status_code_of(error, otherwise);
  return absl::StrCat(static_cast<int>(code), "\n", replica, "\n", detail::describe_exception(error));
}

std::optional<WireError> decode_error(absl::string_view bytes) {
  // "code\nreplica\nmessage", as encode_error writes it.
  const std::size_t first = bytes.find('\n');
  const std::size_t second = first == absl::string_view::npos ? first : bytes.find('\n', first + 1);
  int code = 0;
  WireError out;
  if (second == absl::string_view::npos || !absl::SimpleAtoi(bytes.substr(0, first), &code) ||
      !absl::SimpleAtoi(bytes.substr(first + 1, second - first - 1), &out.replica)) {
    return std::nullopt;
  }
  out.code = static_cast<absl::StatusCode>(code);
  out.message = std::string(bytes.substr(second + 1));
  return out;
}

}  // namespace distribute::cluster
