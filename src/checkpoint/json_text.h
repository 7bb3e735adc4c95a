// The checkpoint layer's files are JSON (the safetensors header, the manager's index), whose strings
// must be UTF-8: names that are not are refused where they are given, before anything is written.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace distribute::detail {

inline bool is_valid_utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// `text` as a JSON string for messages, each invalid byte shown as U+FFFD.
inline std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace distribute::detail
