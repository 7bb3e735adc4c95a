// The strategy from the flags' values, and the progress worker 0 prints.
#include "command_line.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iterator>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/str_cat.h"
#if DISTRIBUTE_HAS_MULTI_WORKER
#include "distribute/strategy/multi_worker_mirrored_strategy.h"
#endif

ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "the folder of the four gzipped IDX files (Debian package dataset-fashion-mnist)");
ABSL_FLAG(uint64_t, seed, 1, "the initial weights and the shuffling");
ABSL_FLAG(int64_t, train_limit, 0, "train on the first N training images only; 0: all 60000");
ABSL_FLAG(bool, multi_worker, false,
          "one worker per process (MultiWorkerMirroredStrategy): start K with mpirun -np K, or as plain processes "
          "with RANK, WORLD_SIZE and DISTRIBUTE_RENDEZVOUS (Gloo)");
ABSL_FLAG(fashion_mnist::Progress, progress, fashion_mnist::Progress::kAuto,
          "what worker 0 shows while it trains: bar (a bar redrawn after every step, and a line per epoch), "
          "lines (a line per epoch), none (the first and last lines only), or auto: bar on the terminal of a "
          "single process, lines elsewhere (a pipe, a file, mpirun)");

namespace fashion_mnist {
namespace {

constexpr std::pair<const char*, Progress> kProgressNames[] = {
    {"auto", Progress::kAuto}, {"bar", Progress::kBar}, {"lines", Progress::kLines}, {"none", Progress::kNone}};

// Whether a launcher (mpirun, srun) started this process as one of a job's.
bool started_by_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

}  // namespace

int run_program(int argc, char** argv, const char* usage, const char* main_file, const std::function<int()>& train) {
  absl::SetProgramUsageMessage(usage);
  // Abseil's default looks for the flags in a file named after the program. CMakeLists.txt cuts the
  // project's root off __FILE__ (-fmacro-prefix-map), so it, and --helpfull's "Flags from" line,
  // is the path inside the project.
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [main = std::string(main_file)](absl::string_view file) {
    return file == main || file == __FILE__;
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::ParseCommandLine(argc, argv);
  try {
    return train();
  } catch (const distribute::RestartRequested& request) {
    return request.exit_code();  // preempted and saved: the strategy and its threads are gone by now
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\n%s: %s\n", std::filesystem::path(argv[0]).filename().c_str(), e.what());
    return 1;
  }
}

bool AbslParseFlag(absl::string_view text, Progress* progress, std::string* error) {
  for (const auto& [name, value] : kProgressNames) {
    if (text == name) {
      *progress = value;
      return true;
    }
  }
  *error = "valid values: auto, bar, lines, none";
  return false;
}

std::string AbslUnparseFlag(Progress progress) {
  return std::find_if(std::begin(kProgressNames), std::end(kProgressNames),
                      [progress](const auto& name) { return name.second == progress; })
      ->first;
}

int replicas_or_default(int asked, bool on_gpus) {
  if (asked > 0) return asked;
  if (on_gpus) return std::max(1, distribute::num_physical_gpus());
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<std::string> replica_devices(int replicas, bool on_gpus) {
  if (on_gpus) {
    const int gpus = distribute::num_physical_gpus();
    if (gpus == 0) {
      throw distribute::UnavailableError(
          absl::StrCat("--device=gpu: no GPU is visible (", distribute::gpu_unavailable_reason(), ")"));
    }
    if (replicas > gpus) {
      if (gpus != 1) {
        throw distribute::InvalidArgumentError(absl::StrCat("--device=gpu: --replicas=", replicas, " but there are ",
                                                            gpus, " GPUs; ask for at most that many replicas"));
      }
      distribute::set_logical_device_configuration(
          0, std::vector<distribute::LogicalDeviceConfiguration>(static_cast<std::size_t>(replicas)));
    }
  }
  std::vector<std::string> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back(absl::StrCat(on_gpus ? "GPU:" : "CPU:", i));
  return devices;
}

std::unique_ptr<distribute::Strategy> make_strategy(const std::vector<std::string>& devices, bool multi_worker) {
  if (multi_worker) {
#if DISTRIBUTE_HAS_MULTI_WORKER
    distribute::MultiWorkerMirroredStrategyOptions options;
    options.local_devices = devices;
    return std::make_unique<distribute::MultiWorkerMirroredStrategy>(std::move(options));
#else
    throw distribute::UnimplementedError(
        "--multi_worker: this build has no multi-worker backend; install libopenmpi-dev or libgloo-dev and "
        "rebuild");
#endif
  }
  return std::make_unique<distribute::MirroredStrategy>(devices);
}

Progress shown_progress(const distribute::Strategy& strategy, Progress asked) {
  if (!strategy.extended().should_save_summary()) return Progress::kNone;
  if (asked != Progress::kAuto) return asked;
  const bool watched =
      ::isatty(STDOUT_FILENO) != 0 && strategy.extended().num_workers() == 1 && !started_by_launcher();
  return watched ? Progress::kBar : Progress::kLines;
}

void draw_progress(const StepProgress& p, int epochs) {
  constexpr int kWidth = 30;
  const int done = static_cast<int>(kWidth * p.step / std::max<std::int64_t>(p.steps, 1));
  const double rate = p.seconds > 0 ? static_cast<double>(p.samples) / p.seconds : 0;
  const double eta = p.step > 0 ? p.seconds * static_cast<double>(p.steps - p.step) / static_cast<double>(p.step) : 0;
  std::printf("\r\033[Kepoch %d/%d [%s%s] %4lld/%lld  %6.0f samples/s  loss %.4f  ETA %.0fs", p.epoch, epochs,
              std::string(static_cast<std::size_t>(done), '#').c_str(),
              std::string(static_cast<std::size_t>(kWidth - done), '.').c_str(), static_cast<long long>(p.step),
              static_cast<long long>(p.steps), rate, p.mean_loss, eta);
  std::fflush(stdout);
}

void print_epoch(const EpochStats& s, int epochs, bool after_bar, const distribute::CollectiveStats& collectives) {
  std::printf("%sepoch %d/%d: loss %.4f, test accuracy %.4f, %.0f samples/s, collectives %.1f%%, input wait %.1f%%\n",
              after_bar ? "\r\033[K" : "", s.epoch, epochs, s.train_loss, s.test_accuracy, s.samples_per_second(),
              100 * s.collective_share, 100 * s.input_share);
  if (const distribute::ReplicaCollectiveStats* slowest = collectives.slowest();
      slowest != nullptr && collectives.replicas.size() > 1) {
    std::printf("  slowest: replica %d, last in %.0f %% of collectives\n", slowest->replica_id,
                100.0 * static_cast<double>(slowest->last_arrivals) / static_cast<double>(slowest->collectives));
  }
  std::fflush(stdout);
}

}  // namespace fashion_mnist
