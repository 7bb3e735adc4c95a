// The conversion loops of CommunicationOptions::compression (src/collective/compression.h) beside a
// memcpy of the same float32 bytes, one thread, in one run:
//   ./build/default/bench/compression_bench
// For each size (float32 bytes): narrow to bfloat16 and to float16 (with the overflow check),
// widen_add back into float32, and memcpy; GB/s of float32 bytes, and each loop's time as a
// multiple of the memcpy's. A loop at about 1x runs at memory speed: the overflow check then costs
// nothing that can be measured. Medians of 15 repeats, each at least 16 MiB of work.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "collective/compression.h"
#include "common.h"

namespace {

using distribute::Compression;
using distribute::bench::kKiB;
using distribute::bench::kMiB;
using distribute::collective::Wire16;

double seconds_per_op(std::size_t bytes, const std::function<void()>& op) {
  const int ops = static_cast<int>(std::max<std::size_t>(1, 16 * kMiB / bytes));
  std::vector<double> times;
  for (int repeat = 0; repeat < 16; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < ops; ++k) op();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (repeat > 0) times.push_back(took.count() / ops);  // the first warms the caches
  }
  return distribute::bench::median(times);
}

}  // namespace

int main() {
  std::printf("# compression loops, one thread: GB/s of float32 bytes (x = time / memcpy time)\n");
  std::printf("# %10s %10s %16s %16s %16s %16s\n", "size", "memcpy", "narrow bf16", "narrow fp16", "widen_add bf16",
              "widen_add fp16");
  for (std::size_t bytes = 64 * kKiB; bytes <= 64 * kMiB; bytes *= 4) {
    const auto count = static_cast<std::int64_t>(bytes / sizeof(float));
    std::vector<float> in(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) in[static_cast<std::size_t>(i)] = static_cast<float>(i % 1000) * 0.37f;
    std::vector<float> out(in.size());
    std::vector<Wire16> wire(in.size());
    const double copy = seconds_per_op(bytes, [&] { std::memcpy(out.data(), in.data(), bytes); });
    std::printf("  %10s %10.2f", distribute::bench::format_bytes(bytes).c_str(), bytes / copy / 1e9);
    for (const Compression c : {Compression::kBfloat16, Compression::kFloat16}) {
      const double t = seconds_per_op(bytes, [&] { distribute::collective::narrow(c, in.data(), wire.data(), count); });
      std::printf(" %9.2f (%4.2fx)", bytes / t / 1e9, t / copy);
    }
    for (const Compression c : {Compression::kBfloat16, Compression::kFloat16}) {
      distribute::collective::narrow(c, in.data(), wire.data(), count);
      const double t = seconds_per_op(bytes, [&] { distribute::collective::widen_add(c, wire.data(), out.data(), count); });
      std::printf(" %9.2f (%4.2fx)", bytes / t / 1e9, t / copy);
    }
    std::printf("\n");
  }
  return 0;
}
