// The epochs' metrics as a CSV file, one row per epoch, for a person to plot (plot_metrics.py
// draws the curves):
//   epoch,train_loss,test_accuracy,samples_per_second,collective_share,input_share,seconds
//   1,0.509768,0.8485,23443.9,0.56828,0.0078846,2.55931
// The shares are fractions of the epoch's training time (EpochStats). Each row is flushed as its
// epoch ends, so the file can be plotted while the job trains.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>

#include "epoch_loop.h"

namespace fashion_mnist {

class MetricsCsv {
 public:
  static constexpr const char* kHeader =
      "epoch,train_loss,test_accuracy,samples_per_second,collective_share,input_share,seconds";

  // Opens `path` for the rows of the epochs after `epochs_done`, those a restored checkpoint holds
  // (0 for a new run). A new run writes a new file, the header alone. A resumed one keeps an
  // existing file's rows up to epochs_done and drops the later ones, of a run that went on past
  // the checkpoint, so that the file describes the checkpoint's epochs. Throws
  // InvalidArgumentError naming the path when it cannot be written, or when the existing file is
  // not such a CSV (another header, a row without its epoch).
  MetricsCsv(const std::filesystem::path& path, int epochs_done);

  // Appends the epoch's row and flushes it.
  void write(const EpochStats& stats);

 private:
  // Writes the buffered rows out; InternalError when the system cannot.
  void flush();

  std::filesystem::path path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
};

}  // namespace fashion_mnist
