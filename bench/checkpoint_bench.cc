// checkpoint_bench: how fast CheckpointManager::save puts a model on disk, beside the same bytes
// written raw (write(2) of every variable's bytes into one file, then fsync): the bound a save
// cannot beat, since it writes those bytes and must make them durable. A save also encodes the
// header, computes the CRC-32 of the data, writes the index and flushes the directory. Rounds
// alternate the two, so that a slow phase of the disk hits both; the table gives the medians.
//
//   ./build/default/bench/checkpoint_bench --parameters=100000000 --variables=10 --rounds=5
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common.h"
#include "distribute/distribute.h"

ABSL_FLAG(int64_t, parameters, 100'000'000, "float32 parameters in the checkpoint");
ABSL_FLAG(int, variables, 10, "variables they are split into");
ABSL_FLAG(int, rounds, 5, "rounds of one save and one raw write each; the table shows the medians");
ABSL_FLAG(std::string, dir, "", "where to write; default: a new folder in the temporary folder");

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Every variable's bytes into one file, fsync'ed: what a save must at least do.
void write_raw(const std::filesystem::path& path, const std::vector<distribute::Variable>& variables) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) std::perror("checkpoint_bench: open"), std::exit(1);
  for (const distribute::Variable& v : variables) {
    const char* data = static_cast<const char*>(v.component(0).raw_data());
    std::size_t left = v.component(0).nbytes();
    while (left > 0) {
      const ssize_t n = ::write(fd, data, left);
      if (n <= 0) std::perror("checkpoint_bench: write"), std::exit(1);
      data += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  if (::fsync(fd) != 0) std::perror("checkpoint_bench: fsync"), std::exit(1);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("CheckpointManager::save beside a raw write + fsync of the same bytes.");
  absl::ParseCommandLine(argc, argv);
  const std::int64_t parameters = absl::GetFlag(FLAGS_parameters);
  const int count = absl::GetFlag(FLAGS_variables);
  std::filesystem::path dir = absl::GetFlag(FLAGS_dir);
  const bool own_dir = dir.empty();
  if (own_dir) dir = std::filesystem::temp_directory_path() / ("checkpoint_bench_" + std::to_string(::getpid()));

  std::vector<distribute::Variable> variables;
  std::vector<std::pair<std::string, distribute::Variable>> named;
  for (int k = 0; k < count; ++k) {
    const std::int64_t size = parameters / count + (k < parameters % count ? 1 : 0);
    std::vector<float> values(static_cast<std::size_t>(size));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) * 0.001f + k;
    variables.emplace_back(distribute::Tensor::from_vector(std::move(values), {size}, distribute::Device::cpu()));
    named.emplace_back(absl::StrCat("v", k), variables.back());
  }
  distribute::CheckpointManager manager(distribute::Checkpoint(named), dir, {.max_to_keep = 1});
  const double bytes = 4.0 * static_cast<double>(parameters);

  std::printf("# checkpoint_bench: %lld float32 parameters (%.0f MiB) in %d variables, %d rounds, into %s\n",
              static_cast<long long>(parameters), bytes / (1 << 20), count, absl::GetFlag(FLAGS_rounds),
              dir.c_str());
  std::vector<double> save_s;
  std::vector<double> raw_s;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    auto start = Clock::now();
    manager.save();
    save_s.push_back(seconds_since(start));
    start = Clock::now();
    write_raw(dir / "raw.bin", variables);
    raw_s.push_back(seconds_since(start));
  }
  const double save = distribute::bench::median(save_s);
  const double raw = distribute::bench::median(raw_s);
  std::printf("%-26s %10s %10s\n", "", "time(s)", "GB/s");
  std::printf("%-26s %10.3f %10.2f\n", "CheckpointManager::save", save, bytes / save / 1e9);
  std::printf("%-26s %10.3f %10.2f\n", "raw write + fsync", raw, bytes / raw / 1e9);
  std::printf("save bandwidth / raw: %.2f\n", raw / save);
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}
