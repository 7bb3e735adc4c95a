// Options, timing, the memcpy baseline and the output format shared by the benchmarks.
#include "common.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

namespace distribute::bench {
namespace {

// The timed repeats of one size should take about this long when --iters is not given.
constexpr double kRepeatBudgetSeconds = 0.3;
constexpr int kMinAutoRepeats = 3;
constexpr int kMaxAutoRepeats = 20;
// A unit moves at least this many bytes (or runs kMaxOps operations).
constexpr std::size_t kUnitBytes = 16 * kMiB;
constexpr int kMaxOps = 1000;
constexpr std::size_t kAlignment = 64;

[[noreturn]] void usage(const char* program, const char* description, const std::string& error) {
  std::FILE* out = error.empty() ? stdout : stderr;
  if (!error.empty()) std::fprintf(out, "%s: %s\n\n", program, error.c_str());
  std::fprintf(out,
               "%s\n\nusage: %s [options]\n"
               "  --replicas LIST   replica counts, e.g. 2,4,8\n"
               "  --min-bytes S     smallest size (suffixes K, M, G = powers of 1024; default 4)\n"
               "  --max-bytes S     largest size (default 256M)\n"
               "  --factor F        size multiplier between rows (default 2)\n"
               "  --iters N         timed repeats per size (default: 3..20, ~0.3 s per size)\n"
               "  --warmup N        untimed repeats before timing (default 2)\n"
               "  --check 0|1       count wrong result elements after timing (default 1)\n"
               "  --ops K           operations per timed repeat (default: 16 MiB / size, 1..1000)\n",
               description, program);
  std::exit(error.empty() ? 0 : 2);
}

int parse_int(const std::string& text, int min) {
  std::size_t used = 0;
  const int value = std::stoi(text, &used);
  if (used != text.size() || value < min) throw std::invalid_argument(text);
  return value;
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> values;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) values.push_back(parse_int(item, 1));
  if (values.empty()) throw std::invalid_argument(text);
  return values;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

void wait_for(const std::atomic<std::uint64_t>& counter, std::uint64_t target) {
  constexpr int kSpins = 2000;
  for (int i = 0; counter.load(std::memory_order_acquire) < target; ++i) {
    if (i < kSpins) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

std::size_t parse_size(std::string_view text) {
  std::size_t multiplier = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': multiplier = kKiB; break;
      case 'M': case 'm': multiplier = kMiB; break;
      case 'G': case 'g': multiplier = 1024 * kMiB; break;
      default: break;
    }
    if (multiplier != 1) text.remove_suffix(1);
  }
  std::size_t used = 0;
  const std::string digits(text);
  const unsigned long long value = std::stoull(digits, &used);
  if (used != digits.size() || digits.empty() || digits[0] == '-') throw std::invalid_argument(digits);
  if (value > std::numeric_limits<std::size_t>::max() / multiplier) throw std::out_of_range(digits);
  return static_cast<std::size_t>(value) * multiplier;
}

Options parse_options(int argc, char** argv, const char* description, std::vector<int> default_replicas) {
  Options options;
  options.replicas = std::move(default_replicas);
  const char* program = argc > 0 ? argv[0] : "bench";
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    std::string value;
    if (name == "--help" || name == "-h") usage(program, description, "");
    if (const std::size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage(program, description, "missing value for " + name);
    }
    try {
      if (name == "--replicas") {
        options.replicas = parse_list(value);
      } else if (name == "--min-bytes") {
        options.min_bytes = parse_size(value);
      } else if (name == "--max-bytes") {
        options.max_bytes = parse_size(value);
      } else if (name == "--factor") {
        options.factor = static_cast<std::size_t>(parse_int(value, 2));
      } else if (name == "--iters") {
        options.iters = parse_int(value, 1);
      } else if (name == "--warmup") {
        options.warmup = parse_int(value, 0);
      } else if (name == "--check") {
        options.check = parse_int(value, 0) != 0;
      } else if (name == "--ops") {
        options.ops = parse_int(value, 1);
      } else {
        usage(program, description, "unknown option " + name);
      }
    } catch (const std::logic_error&) {  // invalid_argument and out_of_range from the parsers
      usage(program, description, "bad value '" + value + "' for " + name);
    }
  }
  if (options.min_bytes == 0 || options.min_bytes > options.max_bytes) {
    usage(program, description, "need 0 < --min-bytes <= --max-bytes");
  }
  return options;
}

std::vector<std::size_t> sweep_sizes(const Options& options) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = options.min_bytes; s <= options.max_bytes; s *= options.factor) sizes.push_back(s);
  return sizes;
}

int ops_per_unit(std::size_t bytes, const Options& options) {
  if (options.ops > 0) return options.ops;
  return static_cast<int>(std::clamp<std::size_t>(kUnitBytes / std::max<std::size_t>(bytes, 1), 1, kMaxOps));
}

double median(std::vector<double> values) { return percentile(std::move(values), 50); }

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100 * static_cast<double>(values.size()));
  const std::size_t index = static_cast<std::size_t>(std::max(rank, 1.0)) - 1;
  return values[std::min(index, values.size() - 1)];
}

Timing time_unit(const std::function<void()>& unit, int ops, const Options& options) {
  using Clock = std::chrono::steady_clock;
  auto timed = [&] {
    const Clock::time_point start = Clock::now();
    unit();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  double last_warmup = 0;
  for (int i = 0; i < options.warmup; ++i) last_warmup = timed();
  int repeats = options.iters;
  if (repeats == 0) {
    if (options.warmup == 0) last_warmup = timed();
    const double fit = kRepeatBudgetSeconds / std::max(last_warmup, 1e-9);
    repeats = static_cast<int>(std::clamp(fit, double{kMinAutoRepeats}, double{kMaxAutoRepeats}));
  }
  std::vector<double> per_op;
  per_op.reserve(static_cast<std::size_t>(repeats));
  for (int i = 0; i < repeats; ++i) per_op.push_back(timed() / ops);
  return {median(per_op), percentile(per_op, 90), repeats};
}

MemcpyBaseline::MemcpyBaseline(std::size_t max_bytes) : max_bytes_(std::max(max_bytes, kAlignment)) {
  stride_ = (max_bytes_ + kAlignment - 1) / kAlignment * kAlignment;
  src_ = static_cast<char*>(std::aligned_alloc(kAlignment, 2 * stride_));
  dst_ = static_cast<char*>(std::aligned_alloc(kAlignment, 2 * stride_));
  if (src_ == nullptr || dst_ == nullptr) throw std::bad_alloc();
  // Pre-fault the buffers so the timing sees copies, not page faults.
  std::memset(src_, 1, 2 * stride_);
  std::memset(dst_, 0, 2 * stride_);
  thread_ = std::thread([this] { helper(); });
}

MemcpyBaseline::~MemcpyBaseline() {
  stop_.store(true, std::memory_order_relaxed);
  start_.fetch_add(1, std::memory_order_release);
  start_.notify_one();
  thread_.join();
  std::free(src_);
  std::free(dst_);
}

void MemcpyBaseline::copy(int thread, std::size_t bytes) {
  const std::size_t base = static_cast<std::size_t>(thread) * stride_;
  std::memcpy(dst_ + base, src_ + base, bytes);
}

void MemcpyBaseline::run_unit(std::size_t bytes, int ops) {
  job_bytes_ = bytes;
  job_ops_ = ops;
  const std::uint64_t base = done_[0].value.load(std::memory_order_relaxed);
  start_.fetch_add(1, std::memory_order_release);
  start_.notify_one();
  for (int k = 0; k < ops; ++k) {
    copy(0, bytes);
    const std::uint64_t target = base + static_cast<std::uint64_t>(k) + 1;
    done_[0].value.store(target, std::memory_order_release);
    wait_for(done_[1].value, target);
  }
}

void MemcpyBaseline::helper() {
  std::uint32_t seen = 0;
  std::uint64_t copies = 0;
  while (true) {
    start_.wait(seen, std::memory_order_acquire);
    seen = start_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    const std::size_t bytes = job_bytes_;
    const int ops = job_ops_;
    for (int k = 0; k < ops; ++k) {
      copy(1, bytes);
      done_[1].value.store(++copies, std::memory_order_release);
      wait_for(done_[0].value, copies);
    }
  }
}

double MemcpyBaseline::bandwidth(std::size_t bytes, const Options& options) {
  if (bytes > max_bytes_) throw std::invalid_argument("MemcpyBaseline: size above max_bytes");
  const int ops = ops_per_unit(bytes, options);
  const Timing t = time_unit([&] { run_unit(bytes, ops); }, ops, options);
  return static_cast<double>(bytes) / t.median_s;
}

MemcpyTable::MemcpyTable(const std::vector<std::size_t>& sizes, const Options& options) : options_(options) {
  if (sizes.empty()) return;
  MemcpyBaseline baseline(*std::max_element(sizes.begin(), sizes.end()));
  for (std::size_t s : sizes) bandwidth_[s] = baseline.bandwidth(s, options_);
}

double MemcpyTable::at(std::size_t bytes) {
  auto it = bandwidth_.find(bytes);
  if (it == bandwidth_.end()) {
    MemcpyBaseline baseline(bytes);
    it = bandwidth_.emplace(bytes, baseline.bandwidth(bytes, options_)).first;
  }
  return it->second;
}

double bus_factor(Collective collective, int n) {
  const double d = static_cast<double>(n);
  return collective == Collective::kAllReduce ? 2 * (d - 1) / d : (d - 1) / d;
}

void print_preamble(const char* title, const Options& options) {
  std::printf("# %s\n", title);
  std::printf("# hardware threads: %u; sizes %s .. %s, factor %zu; warmup %d; repeats %s; check %d\n",
              std::thread::hardware_concurrency(), format_bytes(options.min_bytes).c_str(),
              format_bytes(options.max_bytes).c_str(), options.factor, options.warmup,
              options.iters > 0 ? std::to_string(options.iters).c_str() : "auto (3..20, ~0.3 s per size)",
              options.check ? 1 : 0);
  std::printf("# time: median over repeats of (time of one repeat / operations per repeat)\n");
  std::printf("# GB/s = 1e9 bytes/s; algbw = size / time; busbw = algbw * 2(n-1)/n (all_reduce), "
              "algbw * (n-1)/n (all_gather, reduce_scatter)\n");
  std::printf("# memcpy: 2 threads each copying size bytes between their own pre-faulted buffers, timed the "
              "same way; ratio = algbw / memcpy\n");
  std::fflush(stdout);
}

void print_table_header(const std::string& title) {
  std::printf("#\n# %s\n", title.c_str());
  std::printf("# %10s %12s %6s %6s %10s %8s %8s %7s %9s %6s\n", "size", "count", "type", "redop", "time",
              "algbw", "busbw", "#wrong", "memcpy", "ratio");
  std::printf("# %10s %12s %6s %6s %10s %8s %8s %7s %9s %6s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
              "(GB/s)", "", "(GB/s)", "");
  std::fflush(stdout);
}

void print_row(const Row& row) {
  const double algbw = static_cast<double>(row.bytes) / row.seconds / 1e9;
  const std::string wrong = row.wrong ? std::to_string(*row.wrong) : "N/A";
  const double memcpy_gbps = row.memcpy_bytes_per_s / 1e9;
  std::printf("  %10zu %12zu %6s %6s %10.2f %8.2f %8.2f %7s %9.2f %6.2f\n", row.bytes, row.count, row.type,
              row.redop, row.seconds * 1e6, algbw, algbw * row.bus_factor, wrong.c_str(), memcpy_gbps,
              memcpy_gbps > 0 ? algbw / memcpy_gbps : 0.0);
  std::fflush(stdout);
}

void Summary::add(const Row& row) { rows_.push_back(row); }

void Summary::print(const std::string& what) const {
  if (rows_.empty()) return;
  double busbw = 0;
  std::int64_t wrong = 0;
  for (const Row& row : rows_) {
    busbw += static_cast<double>(row.bytes) / row.seconds / 1e9 * row.bus_factor;
    wrong += row.wrong.value_or(0);
  }
  std::printf("# %s: out of bounds values: %lld %s\n", what.c_str(), static_cast<long long>(wrong),
              rows_.front().wrong ? (wrong == 0 ? "OK" : "WRONG") : "(not checked)");
  std::printf("# %s: avg bus bandwidth: %.3f GB/s\n", what.c_str(), busbw / static_cast<double>(rows_.size()));
  for (const Row& row : rows_) {
    const double algbw = static_cast<double>(row.bytes) / row.seconds;
    if (row.bytes == rows_.front().bytes && row.bytes <= 64) {
      std::printf("# %s: %s latency: %.2f us\n", what.c_str(), format_bytes(row.bytes).c_str(), row.seconds * 1e6);
    }
    if (row.bytes == 4 * kMiB || row.bytes == 64 * kMiB) {
      std::printf("# %s: %s ratio to memcpy: %.2f\n", what.c_str(), format_bytes(row.bytes).c_str(),
                  algbw / row.memcpy_bytes_per_s);
    }
  }
  std::fflush(stdout);
}

double core_round_trip_seconds(int samples, int trips) {
  struct alignas(64) Line {
    std::atomic<std::uint64_t> value{0};
  };
  Line ping;
  Line pong;
  const auto pin = [](int core) {
    if (std::thread::hardware_concurrency() < 2) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  };
  const std::uint64_t total = static_cast<std::uint64_t>(samples) * static_cast<std::uint64_t>(trips);
  std::thread echo([&] {
    pin(1);
    for (std::uint64_t i = 1; i <= total; ++i) {
      while (ping.value.load(std::memory_order_acquire) != i) {
      }
      pong.value.store(i, std::memory_order_release);
    }
  });
  cpu_set_t before;
  CPU_ZERO(&before);
  pthread_getaffinity_np(pthread_self(), sizeof(before), &before);
  pin(0);
  std::vector<double> per_trip;
  std::uint64_t i = 0;
  for (int s = 0; s < samples; ++s) {
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < trips; ++t) {
      ping.value.store(++i, std::memory_order_release);
      while (pong.value.load(std::memory_order_acquire) != i) {
      }
    }
    per_trip.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / trips);
  }
  echo.join();
  pthread_setaffinity_np(pthread_self(), sizeof(before), &before);
  return median(per_trip);
}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB"};
  std::size_t unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), value == std::floor(value) ? "%.0f %s" : "%.1f %s", value, kUnits[unit]);
  return text;
}

int main_reporting_errors(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace distribute::bench
