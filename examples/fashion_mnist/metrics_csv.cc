// The metrics CSV: a resumed run's earlier rows kept, each new row flushed.
#include "metrics_csv.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fashion_mnist {
namespace {

// The rows of an existing metrics file whose epoch is at most `last`; none when there is no file.
std::vector<std::string> rows_up_to(const std::filesystem::path& path, int last) {
  std::vector<std::string> rows;
  std::ifstream in(path);
  if (!in) return rows;
  std::string line;
  if (std::getline(in, line) && line != MetricsCsv::kHeader) {
    throw distribute::InvalidArgumentError(absl::StrCat("metrics file ", path.string(), ": its first line \"", line,
                                                        "\" is not the header \"", MetricsCsv::kHeader,
                                                        "\"; is it the right file?"));
  }
  for (int number = 2; std::getline(in, line); ++number) {
    int epoch = 0;
    if (!absl::SimpleAtoi(absl::string_view(line).substr(0, line.find(',')), &epoch)) {
      throw distribute::InvalidArgumentError(absl::StrCat("metrics file ", path.string(), ", line ", number, ": \"",
                                                          line, "\" does not start with an epoch"));
    }
    if (epoch <= last) rows.push_back(line);
  }
  return rows;
}

}  // namespace

MetricsCsv::MetricsCsv(const std::filesystem::path& path, int epochs_done) : path_(path), file_(nullptr, std::fclose) {
  const std::vector<std::string> kept = epochs_done > 0 ? rows_up_to(path, epochs_done) : std::vector<std::string>{};
  file_.reset(std::fopen(path.c_str(), "w"));
  if (!file_) {
    throw distribute::InvalidArgumentError(
        absl::StrCat("metrics file ", path.string(), ": cannot open it for writing (", std::strerror(errno), ")"));
  }
  std::fprintf(file_.get(), "%s\n", kHeader);
  for (const std::string& row : kept) std::fprintf(file_.get(), "%s\n", row.c_str());
  flush();
}

void MetricsCsv::write(const EpochStats& stats) {
  std::fprintf(file_.get(), "%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n", stats.epoch, stats.train_loss, stats.test_accuracy,
               stats.samples_per_second(), stats.collective_share, stats.input_share, stats.seconds);
  flush();
}

void MetricsCsv::flush() {
  if (std::fflush(file_.get()) != 0) {
    throw distribute::InternalError(
        absl::StrCat("metrics file ", path_.string(), ": writing failed (", std::strerror(errno), ")"));
  }
}

}  // namespace fashion_mnist
