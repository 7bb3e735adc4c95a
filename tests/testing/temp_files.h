// Paths of scratch files in the temporary directory, named after a process so that tests running
// side by side (ctest -j, or one test binary of two builds) never share one. Free of gtest, for the
// MPI programs that check themselves.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace distribute::testing {

// "<temporary directory>/<stem>.<pid><extension>". The workers of a job that share one file pass
// the same process id (the first worker's) as `pid`.
inline std::filesystem::path temp_path(const std::string& stem, const std::string& extension = "",
                                       int pid = static_cast<int>(::getpid())) {
  return std::filesystem::temp_directory_path() / (stem + "." + std::to_string(pid) + extension);
}

}  // namespace distribute::testing
