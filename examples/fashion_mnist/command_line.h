// What the Fashion-MNIST programs (train_fashion_mnist and, with the torch component,
// train_torch_fashion_mnist) share around their training loops: the strategy their flags ask for,
// and what worker 0 prints while it trains (--progress: a bar, a line per epoch, or neither).
// The flags that mean the same in both are defined here, the others in each program's main.cc.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/strings/string_view.h"
#include "distribute/distribute.h"
#include "epoch_loop.h"

namespace fashion_mnist {

// A program's main: parses the flags (--help and --helpshort list those defined in `main_file`, the
// program's __FILE__, and the shared ones), then returns what `train` returns; kRestartExitCode
// once a preempted run has saved (RestartRequested, caught once the strategy and its threads are
// gone); 1, printing the error after the program's name, for an exception.
int run_program(int argc, char** argv, const char* usage, const char* main_file, const std::function<int()>& train);

// What worker 0 shows while it trains (--progress); the other workers show nothing.
enum class Progress {
  kAuto,   // kBar where a person watches, on the terminal of a single process; kLines elsewhere
  kBar,    // a bar redrawn after every step, and a line per epoch
  kLines,  // a line per epoch
  kNone,   // the first and the last line only
};

// --progress=auto|bar|lines|none (Abseil's flag parsing finds these by the type's namespace).
bool AbslParseFlag(absl::string_view text, Progress* progress, std::string* error);
std::string AbslUnparseFlag(Progress progress);

// The replicas of this process: `asked` when > 0, otherwise one per core (one per GPU, at least
// one, with on_gpus).
int replicas_or_default(int asked, bool on_gpus);

// "CPU:0".."CPU:n-1" or "GPU:0".."GPU:n-1"; n GPUs on a machine with one split it into n logical
// GPUs. UnavailableError without a GPU, InvalidArgumentError for more replicas than GPUs (of two
// or more).
std::vector<std::string> replica_devices(int replicas, bool on_gpus);

// MirroredStrategy over `devices`, or with multi_worker MultiWorkerMirroredStrategy (one worker per
// process that mpirun or any launcher starts, `devices` its local ones); UnimplementedError for
// multi_worker in a build without a multi-worker backend.
std::unique_ptr<distribute::Strategy> make_strategy(const std::vector<std::string>& devices, bool multi_worker);

// `asked` as this worker shows it: nothing on workers other than 0, and kAuto resolved (a bar on
// the terminal of a single process that no launcher started, lines elsewhere: mpirun gives its
// children a pseudo-terminal even when its own output goes to a file).
Progress shown_progress(const distribute::Strategy& strategy, Progress asked);

// Redraws one line: "epoch 3/10 [#######.......]  120/469  40213 samples/s  loss 0.4121  ETA 3s".
void draw_progress(const StepProgress& progress, int epochs);

// "epoch 3/10: loss 0.3121, test accuracy 0.8712, 40213 samples/s, collectives 7.6%, input wait
// 1.5%"; after_bar: the line replaces the bar. Then the epoch's straggler: the replica (of this
// worker: worker 0's, as only it prints) that the others waited for most often.
void print_epoch(const EpochStats& stats, int epochs, bool after_bar, const distribute::CollectiveStats& collectives);

}  // namespace fashion_mnist

// The flags the programs share, defined in command_line.cc; --help lists them after the program's
// own (run_program).
ABSL_DECLARE_FLAG(std::string, data_dir);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(int64_t, train_limit);
ABSL_DECLARE_FLAG(bool, multi_worker);
ABSL_DECLARE_FLAG(fashion_mnist::Progress, progress);
