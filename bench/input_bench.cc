// Distributed input on a Fashion-MNIST-sized pipeline: 60,000 examples of 784 float32 pixels and
// an int32 label, from_tensor_slices -> shuffle(60,000) -> batch(256), through
// experimental_distribute_dataset on MirroredStrategy(CPU:0..3).
//   1. Throughput: an epoch read to the end (the step does nothing) against, in the same run, a
//      bare loop that memcpy's the same bytes in the same order: each example's pixels and label,
//      drawn through a shuffled index, into a batch buffer of 256 rows. That is the least any
//      shuffle + batch must do; ratio = pipeline elements/s / bare loop elements/s (goal >= 0.7).
//   2. Overlap: an epoch whose step sleeps 2 ms on every replica (strategy.run); the time the loop
//      spends in get_next, as a share of the epoch (goal <= 5%: the next step is prepared while
//      the current one runs).
// Times are medians over --repeats (default 7) epochs, bare loop and pipeline alternating.
// Flags: --help.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common.h"
#include "distribute/distribute.h"
#include "replica_bench.h"

ABSL_FLAG(int, repeats, 7, "epochs of each kind, >= 1; the table shows the medians");

namespace distribute::bench {
namespace {

constexpr std::int64_t kExamples = 60000;
constexpr std::int64_t kPixels = 784;
constexpr std::int64_t kBatch = 256;
constexpr int kReplicas = 4;
constexpr std::uint64_t kSeed = 2024;

using Clock = std::chrono::steady_clock;
using Example = std::pair<Tensor, Tensor>;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Data {
  Tensor images = Tensor::empty(DType::kFloat32, Shape{kExamples, kPixels}, Device::cpu());
  Tensor labels = Tensor::empty(DType::kInt32, Shape{kExamples}, Device::cpu());
  Data() {
    float* pixels = images.data<float>();
    for (std::int64_t i = 0; i < kExamples * kPixels; ++i) pixels[i] = static_cast<float>(i % 251) / 251.0f;
    std::int32_t* classes = labels.data<std::int32_t>();
    for (std::int64_t i = 0; i < kExamples; ++i) classes[i] = static_cast<std::int32_t>(i % 10);
  }
};

// The bare loop: the same bytes as the pipeline, copied in a shuffled order into batch buffers.
// `row_bytes` is the size of an example's pixels: read from the data's shape, as any loop over
// data it did not compile in reads it, or the compile-time constant, which lets the compiler
// replace each memcpy call with inline moves. Returns the seconds of one epoch and a checksum.
std::pair<double, std::int64_t> bare_epoch(const Data& data, std::size_t row_bytes, std::vector<std::int64_t>& order,
                                           std::mt19937_64& rng) {
  std::vector<float> image_batch(static_cast<std::size_t>(kBatch * kPixels));
  std::vector<std::int32_t> label_batch(static_cast<std::size_t>(kBatch));
  const auto* pixels = static_cast<const char*>(data.images.raw_data());
  const auto* classes = static_cast<const std::int32_t*>(data.labels.raw_data());
  const Clock::time_point start = Clock::now();
  std::shuffle(order.begin(), order.end(), rng);
  std::int64_t checksum = 0;
  for (std::int64_t first = 0; first < kExamples; first += kBatch) {
    const std::int64_t rows = std::min(kBatch, kExamples - first);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t example = order[static_cast<std::size_t>(first + r)];
      std::memcpy(image_batch.data() + r * kPixels, pixels + example * static_cast<std::int64_t>(row_bytes),
                  row_bytes);
      label_batch[static_cast<std::size_t>(r)] = classes[example];
    }
    checksum += label_batch[static_cast<std::size_t>(rows - 1)] + static_cast<std::int64_t>(image_batch[0] > 2.0f);
  }
  return {seconds_since(start), checksum};
}

// One epoch through the distributed dataset; returns the seconds and the examples seen.
std::pair<double, std::int64_t> pipeline_epoch(const DistributedDataset<Example>& dist) {
  const Clock::time_point start = Clock::now();
  std::int64_t examples = 0;
  for (const PerReplica<Example>& batch : dist) {
    for (const Example& local : batch.values()) examples += local.second.shape()[0];
  }
  return {seconds_since(start), examples};
}

// One epoch whose step sleeps 2 ms on every replica; returns the epoch's and get_next's seconds.
std::pair<double, double> overlap_epoch(Strategy& strategy, const DistributedDataset<Example>& dist) {
  const Clock::time_point start = Clock::now();
  double waiting = 0;
  DistributedIterator<Example> it = dist.make_iterator();
  for (;;) {
    const Clock::time_point ask = Clock::now();
    std::optional<PerReplica<Example>> batch = it.get_next_as_optional();
    waiting += seconds_since(ask);
    if (!batch) break;
    strategy.run([](const Example&) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }, *batch);
  }
  return {seconds_since(start), waiting};
}

int run(int argc, char** argv) {
  absl::SetProgramUsageMessage("Distributed input on a Fashion-MNIST-sized pipeline: throughput and overlap.");
  const std::vector<char*> extra = absl::ParseCommandLine(argc, argv);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (extra.size() > 1 || repeats < 1) {
    std::fprintf(stderr, "%s: %s; see --help\n", argv[0],
                 extra.size() > 1 ? ("unexpected argument '" + std::string(extra[1]) + "'").c_str()
                                  : "--repeats must be >= 1");
    return 2;
  }
  const Data data;
  MirroredStrategy strategy(cpu_devices(kReplicas));
  const auto dataset = data::Dataset<Example>::from_tensor_slices({data.images, data.labels})
                           .shuffle(kExamples, kSeed)
                           .batch(kBatch);
  const DistributedDataset<Example> dist = strategy.experimental_distribute_dataset(dataset);
  const double bytes = static_cast<double>(kExamples) * (kPixels * sizeof(float) + sizeof(std::int32_t));

  std::printf("# input_bench: %lld x %lld float32 + int32 labels, shuffle(%lld), batch(%lld), %d replicas, "
              "%d repeats, %u hardware threads\n",
              static_cast<long long>(kExamples), static_cast<long long>(kPixels), static_cast<long long>(kExamples),
              static_cast<long long>(kBatch), kReplicas, repeats, std::thread::hardware_concurrency());
  std::vector<std::int64_t> order(static_cast<std::size_t>(kExamples));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(kSeed);
  const auto run_time_row_bytes = static_cast<std::size_t>(data.images.shape()[1]) * sizeof(float);
  constexpr std::size_t kInlinedRowBytes = kPixels * sizeof(float);
  std::vector<double> bare, inlined, pipeline;
  std::int64_t checksum = 0;
  bool complete = true;
  (void)pipeline_epoch(dist);  // warm-up: the pool's blocks, the pages of the batch buffers
  (void)bare_epoch(data, run_time_row_bytes, order, rng);
  for (int r = 0; r < repeats; ++r) {
    const auto [bare_s, sum] = bare_epoch(data, run_time_row_bytes, order, rng);
    const auto [pipeline_s, examples] = pipeline_epoch(dist);
    const auto [inlined_s, inlined_sum] = bare_epoch(data, kInlinedRowBytes, order, rng);
    bare.push_back(bare_s);
    pipeline.push_back(pipeline_s);
    inlined.push_back(inlined_s);
    checksum += sum + inlined_sum;
    complete &= examples == kExamples;
  }
  const double bare_s = median(bare);
  const double inlined_s = median(inlined);
  const double pipeline_s = median(pipeline);
  std::printf("#\n# 1. throughput (median epoch; GB/s = 1e9 bytes/s of pixels + labels)\n");
  const auto row = [&](const char* what, double s) {
    std::printf("  %-46s %10.2f %14.0f %8.2f\n", what, s * 1e3, kExamples / s, bytes / s / 1e9);
  };
  std::printf("  %-46s %10s %14s %8s\n", "", "epoch (ms)", "elements/s", "GB/s");
  row("bare memcpy loop (same bytes)", bare_s);
  row("bare loop, row size compiled in (inlined copy)", inlined_s);
  row("experimental_distribute_dataset", pipeline_s);
  std::printf("  ratio (pipeline / bare loop elements/s): %.2f (goal >= 0.70); against the inlined copy: %.2f%s\n",
              bare_s / pipeline_s, inlined_s / pipeline_s, complete ? "" : "  EXAMPLES MISSING");
  std::printf("  (checksum %lld)\n", static_cast<long long>(checksum));

  std::vector<double> shares;
  double epoch_s = 0;
  for (int r = 0; r < std::max(1, repeats / 2); ++r) {
    const auto [total, waiting] = overlap_epoch(strategy, dist);
    shares.push_back(waiting / total);
    epoch_s = total;
  }
  std::printf("#\n# 2. overlap: a step that sleeps 2 ms on each replica, %lld steps\n",
              static_cast<long long>((kExamples + kBatch - 1) / kBatch));
  std::printf("  waiting for input: %.2f%% of the epoch (median over %zu epochs; last epoch %.1f ms; goal <= 5%%)\n",
              median(shares) * 100, shares.size(), epoch_s * 1e3);
  return complete ? 0 : 1;
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) { return distribute::bench::run(argc, argv); }
