// Shared pieces of the benchmarks: command-line options, the size sweep, the timing rule (median
// over repeats of a timed unit that performs several operations), the same-run 2-thread memcpy
// baseline and nccl-tests style output. Depends only on the standard library, so the MPI
// benchmark uses it too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace distribute::bench {

inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kMiB = 1024 * kKiB;

struct Options {
  std::vector<int> replicas;
  std::size_t min_bytes = 4;
  std::size_t max_bytes = 256 * kMiB;
  std::size_t factor = 2;
  // Timed repeats per size; 0 picks 3..20 so that the repeats of one size take about 0.3 s.
  int iters = 0;
  // Untimed units before the timed ones (also used to estimate the unit's time).
  int warmup = 2;
  bool check = true;
  // Operations per timed unit; 0 picks ops_per_unit(bytes).
  int ops = 0;
};

// Parses --replicas 2,4,8 --min-bytes 4 --max-bytes 256M --factor 2 --iters N --warmup N
// --check 0/1 --ops K (sizes take K, M, G suffixes, powers of 1024). Prints the usage and exits
// on --help or a bad argument.
Options parse_options(int argc, char** argv, const char* description, std::vector<int> default_replicas);

// "64K" -> 65536: digits with an optional K, M or G suffix (powers of 1024). Throws
// std::invalid_argument or std::out_of_range for anything else.
std::size_t parse_size(std::string_view text);

// min_bytes, min_bytes * factor, ... up to max_bytes.
std::vector<std::size_t> sweep_sizes(const Options& options);

// Operations per timed unit for a collective of `bytes`: enough that the cost of one run
// (dispatch + join, a few microseconds) is amortised, at most 1000.
int ops_per_unit(std::size_t bytes, const Options& options);

// Per-operation time of a unit that performs `ops` operations, over the timed repeats.
struct Timing {
  double median_s = 0;
  double p90_s = 0;
  int repeats = 0;
};

// Runs unit() options.warmup times, then the timed repeats, each timed with steady_clock.
Timing time_unit(const std::function<void()>& unit, int ops, const Options& options);

// Waits until counter >= target: spins, then yields, so that a partner preempted by another
// process gets the core back instead of waiting out a whole time slice. How the two threads of a
// baseline wait for each other.
void wait_for(const std::atomic<std::uint64_t>& counter, std::uint64_t target);

double median(std::vector<double> values);
// The nearest-rank percentile p (0..100).
double percentile(std::vector<double> values, double p);

// The reference bandwidth: two threads each copy S bytes between their own preallocated,
// pre-faulted buffers, synchronised after every copy like the replicas of a collective, and the
// bandwidth counts S once. Two threads reading S and writing S each is what a 2-replica
// all_reduce of S bytes moves (each replica reads its half of both inputs and writes it to both
// outputs), so a ratio of 1 means the all_reduce runs at the machine's copy speed. Timed with
// time_unit and ops_per_unit like the collectives. The helper thread sleeps between units.
class MemcpyBaseline {
 public:
  explicit MemcpyBaseline(std::size_t max_bytes);
  ~MemcpyBaseline();
  MemcpyBaseline(const MemcpyBaseline&) = delete;
  MemcpyBaseline& operator=(const MemcpyBaseline&) = delete;

  // Bytes per second of copying `bytes` (<= max_bytes), counting the S bytes once.
  double bandwidth(std::size_t bytes, const Options& options);

 private:
  struct alignas(64) Counter {
    std::atomic<std::uint64_t> value{0};
  };

  void run_unit(std::size_t bytes, int ops);
  void copy(int thread, std::size_t bytes);
  void helper();

  std::size_t max_bytes_;
  std::size_t stride_ = 0;  // where the second thread's buffers start
  char* src_;
  char* dst_;
  std::size_t job_bytes_ = 0;
  int job_ops_ = 0;
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<std::uint32_t> start_{0};
  Counter done_[2];
  std::thread thread_;
};

// The memcpy bandwidth of every size of the sweep, measured once up front (the baseline's
// buffers are freed before the collectives run); other sizes are measured when first asked for.
class MemcpyTable {
 public:
  MemcpyTable(const std::vector<std::size_t>& sizes, const Options& options);
  // Bytes per second for `bytes`.
  double at(std::size_t bytes);

 private:
  Options options_;
  std::map<std::size_t, double> bandwidth_;
};

enum class Collective { kAllReduce, kAllGather, kReduceScatter };

// busbw = algbw * 2(n-1)/n for all_reduce, algbw * (n-1)/n for all_gather and reduce_scatter
// (nccl-tests).
double bus_factor(Collective collective, int n);

// Prints the benchmark's title, the machine and the meaning of the columns.
void print_preamble(const char* title, const Options& options);
// "# <title>, N replicas" and the column header.
void print_table_header(const std::string& title);

struct Row {
  std::size_t bytes = 0;
  std::size_t count = 0;
  const char* type = "float";
  const char* redop = "sum";
  double seconds = 0;  // per operation
  double bus_factor = 1;
  std::optional<std::int64_t> wrong;  // nullopt: not checked
  double memcpy_bytes_per_s = 0;
};

// One row: size count type redop time(us) algbw(GB/s) busbw(GB/s) #wrong memcpy(GB/s) ratio.
void print_row(const Row& row);

// Collects rows to print the summary of one table: average bus bandwidth, the 4-byte latency and
// the ratios at 4 MiB and 64 MiB when the sweep has them.
class Summary {
 public:
  void add(const Row& row);
  void print(const std::string& what) const;

 private:
  std::vector<Row> rows_;
};

// The machine's floor for any exchange between two cores: the median seconds of one round trip
// of a cache line between two spinning threads (one writes its line, the other sees it and writes
// its own, the first sees that), on cores 0 and 1 when there are two. Each sample times `trips`
// round trips.
double core_round_trip_seconds(int samples = 200, int trips = 2000);

// "4 B", "64 KiB", "256 MiB".
std::string format_bytes(std::size_t bytes);

// A benchmark's main: returns run(argc, argv), or prints an exception as "<program>: <what>" (the
// library's errors say what it was doing and CUDA's or NCCL's reason) and returns 1.
int main_reporting_errors(const char* program, int (*run)(int, char**), int argc, char** argv);

}  // namespace distribute::bench
