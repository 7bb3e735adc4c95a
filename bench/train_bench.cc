// train_bench: the Fashion-MNIST example's training throughput with 1, 2 and 4 replicas on the same
// global batch, and where a step's time goes. Each round trains --steps steps with every replica
// count in turn (so that a slow phase of the machine hits them alike); the table gives the median
// over the rounds of samples/s, the speed-up over one replica, the step time, and the shares of the
// training time spent in the gradients' all_reduce (waiting for the other replicas included) and
// waiting for the next batch.
//
// With --preemption_handler every replica count also trains through a PreemptionCheckpointHandler
// (its steps counted, the workers' stop request carried by each step), alternating with plain
// strategy.run in each round, and a second table gives the handler's cost. With --compare_overlap
// every replica count also trains with the other --overlap setting, alternating likewise, and a
// table gives both, and the median and range over the rounds of their ratio. The order of the alternatives
// flips every round, so that neither always runs first.
//
//   ./build/default/bench/train_bench --replicas=1,2,4 --steps=300 --rounds=5
//   ./build/default/bench/train_bench --replicas=2 --hidden=2048,2048 --bucket_mb=4 --compare_overlap
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "idx.h"
#include "trainer.h"

ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist", "the Fashion-MNIST files");
ABSL_FLAG(std::string, replicas, "1,2,4", "the replica counts to compare");
ABSL_FLAG(int64_t, steps, 300, "timed steps per replica count and round");
ABSL_FLAG(int, rounds, 5, "rounds; the table shows the medians");
ABSL_FLAG(int64_t, batch_size, 128, "the global batch");
ABSL_FLAG(bool, shard_optimizer_state, false, "Adam's slots in shards across the replicas (ZeRO-1)");
ABSL_FLAG(bool, preemption_handler, false,
          "also train through a PreemptionCheckpointHandler, alternating with plain strategy.run, and print its cost");
ABSL_FLAG(std::string, hidden, "256,128", "the MLP's hidden widths");
ABSL_FLAG(bool, overlap, fashion_mnist::TrainerOptions{}.overlap,
          "sum the gradients in buckets during the backward pass (the example's --overlap)");
ABSL_FLAG(double, bucket_mb, 25, "with overlap: the bucket size in MiB");
ABSL_FLAG(std::string, compression, "none",
          "none, bf16 or fp16: the gradients' compression between workers (in one process it changes nothing)");
ABSL_FLAG(bool, compare_overlap, false,
          "also train with the other --overlap setting, alternating in each round, and print both");

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The positive integers of a comma-separated flag; exits naming the flag otherwise.
std::vector<int> positive_list(const std::string& text, const char* flag, const char* example) {
  std::vector<int> values;
  for (const auto& part : absl::StrSplit(text, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      std::fprintf(stderr, "train_bench: --%s takes positive integers, e.g. %s\n", flag, example);
      std::exit(2);
    }
    values.push_back(n);
  }
  return values;
}

distribute::Compression compression_flag() {
  try {
    return distribute::parse_compression(absl::GetFlag(FLAGS_compression));
  } catch (const distribute::InvalidArgumentError& e) {
    std::fprintf(stderr, "train_bench: --compression: %s\n", e.what());
    std::exit(2);
  }
}

// One way to train that a round runs for every replica count.
struct Variant {
  bool handled = false;  // through a PreemptionCheckpointHandler
  bool overlap = false;
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Training throughput of the Fashion-MNIST example with 1, 2, 4 replicas.");
  absl::ParseCommandLine(argc, argv);
  const std::vector<int> counts = positive_list(absl::GetFlag(FLAGS_replicas), "replicas", "1,2,4");
  const fashion_mnist::FashionMnist data = fashion_mnist::load(absl::GetFlag(FLAGS_data_dir));
  fashion_mnist::TrainerOptions options;
  options.global_batch_size = absl::GetFlag(FLAGS_batch_size);
  options.shard_optimizer_state = absl::GetFlag(FLAGS_shard_optimizer_state);
  options.hidden.clear();
  for (const int width : positive_list(absl::GetFlag(FLAGS_hidden), "hidden", "256,128")) options.hidden.push_back(width);
  options.bucket_bytes = std::max<std::int64_t>(1, std::llround(absl::GetFlag(FLAGS_bucket_mb) * (1 << 20)));
  options.compression = compression_flag();
  const bool overlap = absl::GetFlag(FLAGS_overlap);
  const std::int64_t steps = absl::GetFlag(FLAGS_steps);

  std::printf("# train_bench: MLP 784-%s-10, Adam%s, global batch %lld, %lld steps x %d rounds, %u cores; "
              "overlap %s (%.3g MiB buckets), compression %s\n",
              absl::StrJoin(options.hidden, "-").c_str(), options.shard_optimizer_state ? " (state in shards)" : "",
              static_cast<long long>(options.global_batch_size), static_cast<long long>(steps),
              absl::GetFlag(FLAGS_rounds), std::thread::hardware_concurrency(),
              absl::GetFlag(FLAGS_compare_overlap) ? "off and on" : (overlap ? "on" : "off"),
              static_cast<double>(options.bucket_bytes) / (1 << 20), absl::GetFlag(FLAGS_compression).c_str());
  std::map<int, std::vector<double>> rate;
  std::map<int, std::vector<double>> collective;
  std::map<int, std::vector<double>> input;
  std::map<int, std::vector<double>> handled_rate;
  std::map<int, std::vector<double>> other_overlap_rate;
  const bool compare_handler = absl::GetFlag(FLAGS_preemption_handler);
  const bool compare_overlap = absl::GetFlag(FLAGS_compare_overlap);
  std::vector<Variant> variants = {{.overlap = overlap}};
  if (compare_handler) variants.push_back({.handled = true, .overlap = overlap});
  if (compare_overlap) variants.push_back({.overlap = !overlap});
  const std::filesystem::path checkpoints =
      std::filesystem::temp_directory_path() / ("train_bench_" + std::to_string(::getpid()));
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const int n : counts) {
      for (std::size_t k = 0; k < variants.size(); ++k) {
        const Variant& variant = variants[round % 2 == 0 ? k : variants.size() - 1 - k];
        const bool handled = variant.handled;
        std::vector<std::string> devices;
        for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
        distribute::MirroredStrategy strategy(devices);
        fashion_mnist::TrainerOptions variant_options = options;
        variant_options.overlap = variant.overlap;
        fashion_mnist::Trainer trainer(strategy, data, variant_options);
        std::optional<distribute::CheckpointManager> manager;
        std::optional<distribute::PreemptionCheckpointHandler> handler;
        if (handled) {
          std::filesystem::remove_all(checkpoints);
          distribute::StrategyScope scope = strategy.scope();
          manager.emplace(trainer.checkpoint(), checkpoints);
          handler.emplace(strategy, *manager);
          trainer.run_steps_through(&*handler);
        }
        trainer.train_epoch({}, 20);  // warm-up: threads started, workspaces sized, caches filled
        const fashion_mnist::EpochStats stats = trainer.train_epoch({}, steps);
        if (handled) {
          handled_rate[n].push_back(stats.samples_per_second());
          continue;
        }
        if (variant.overlap != overlap) {
          other_overlap_rate[n].push_back(stats.samples_per_second());
          continue;
        }
        rate[n].push_back(stats.samples_per_second());
        collective[n].push_back(stats.collective_share);
        input[n].push_back(stats.input_share);
      }
    }
  }
  std::filesystem::remove_all(checkpoints);
  std::printf("%8s %12s %9s %10s %12s %11s\n", "replicas", "samples/s", "speed-up", "step(ms)", "collectives",
              "input wait");
  const double base = rate.count(1) ? median(rate[1]) : 0;
  for (const int n : counts) {
    const double r = median(rate[n]);
    std::printf("%8d %12.0f %8.2fx %10.3f %11.1f%% %10.1f%%\n", n, r, base > 0 ? r / base : 0,
                1e3 * static_cast<double>(options.global_batch_size) / r, 100 * median(collective[n]),
                100 * median(input[n]));
  }
  if (compare_handler) {
    std::printf("\n%8s %22s %22s %9s\n", "replicas", "strategy.run samples/s", "handler.run samples/s", "handler");
    for (const int n : counts) {
      const double plain = median(rate[n]);
      const double handled = median(handled_rate[n]);
      std::printf("%8d %22.0f %22.0f %+8.1f%%\n", n, plain, handled, 100 * (handled / plain - 1));
    }
  }
  if (compare_overlap) {
    std::printf("\n%8s %26s %20s %26s %18s\n", "replicas", "one collective samples/s", "overlap samples/s",
                "overlap / one collective", "rounds' range");
    for (const int n : counts) {
      const std::vector<double>& with = overlap ? rate[n] : other_overlap_rate[n];
      const std::vector<double>& without = overlap ? other_overlap_rate[n] : rate[n];
      std::vector<double> ratios;
      for (std::size_t r = 0; r < with.size(); ++r) ratios.push_back(with[r] / without[r] - 1);
      const auto [low, high] = std::minmax_element(ratios.begin(), ratios.end());
      std::printf("%8d %26.0f %20.0f %+25.1f%% %+8.1f%%..%+.1f%%\n", n, median(without), median(with),
                  100 * median(ratios), 100 * *low, 100 * *high);
    }
  }
  return 0;
}
