// Whole files as strings of bytes, for the tests that read, corrupt or write checkpoint files.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace distribute::testing {

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Replaces the file's contents with `bytes`.
inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace distribute::testing
