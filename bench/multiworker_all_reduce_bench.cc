// MultiWorkerMirroredStrategy's all_reduce beside raw MPI, in one launch of four processes:
//   mpirun -np 4 --bind-to none ./build/default/bench/multiworker_all_reduce_bench --max_bytes=64M --factor=4
// For each size, alternately and on buffers of the same size: the library's all_reduce (float32,
// sum) by ranks 0 and 1 as 2 workers x 2 local replicas (--replicas 2) on a sub-communicator; raw
// MPI_Allreduce in place by the same 2 processes (the cross-process step the library's one thread
// per worker performs); and flat MPI_Allreduce by all 4 processes, one per replica. Ranks 2 and 3
// sleep while the 2-process rows run. nccl-tests columns, with the same-run 2-thread memcpy
// bandwidth measured by rank 0 while the others sleep; busbw counts the library's 4 replicas and
// MPI's ranks. Under `mpirun -np 2` the flat rows are left out. --compression=bf16 sends the
// library's values between the workers in 16 bits (algbw counts the float32 bytes). Flags: --help.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common.h"
#include "mpi_barrier.h"
#include "distribute/distribute.h"
#include "distribute/mpi/mpi_cluster_resolver.h"

namespace distribute::bench {

// A size on the command line: 4, 64K, 16M, 1G (powers of 1024).
struct Bytes {
  std::size_t value = 0;
};

bool AbslParseFlag(absl::string_view text, Bytes* bytes, std::string* error) {
  try {
    bytes->value = parse_size(std::string(text));
    return true;
  } catch (const std::logic_error&) {  // invalid_argument and out_of_range
    *error = "a size is digits with an optional K, M or G (powers of 1024)";
    return false;
  }
}

std::string AbslUnparseFlag(Bytes bytes) {
  for (const auto& [unit, suffix] : {std::pair{1024 * kMiB, "G"}, std::pair{kMiB, "M"}, std::pair{kKiB, "K"}}) {
    if (bytes.value >= unit && bytes.value % unit == 0) return std::to_string(bytes.value / unit) + suffix;
  }
  return std::to_string(bytes.value);
}

}  // namespace distribute::bench

using distribute::bench::Bytes;
ABSL_FLAG(int, replicas, 2, "local replicas of each of the 2 workers (CPU:0..L-1), >= 1");
ABSL_FLAG(Bytes, min_bytes, Bytes{4}, "smallest size (suffixes K, M, G: powers of 1024)");
ABSL_FLAG(Bytes, max_bytes, Bytes{256 * distribute::bench::kMiB}, "largest size, >= --min_bytes");
ABSL_FLAG(int, factor, 2, "size multiplier between rows, >= 2");
ABSL_FLAG(int, iters, 5, "timed repeats per size, >= 1 (every rank times as many)");
ABSL_FLAG(int, warmup, 2, "untimed repeats before the timed ones, >= 0");
ABSL_FLAG(bool, check, true, "count the wrong elements of the library's all_reduce after timing");
ABSL_FLAG(int, ops, 0, "operations per timed repeat; 0: 16 MiB / size, 1..1000");
ABSL_FLAG(std::string, compression, "none",
          "the library's CommunicationOptions::compression: none, bf16 or fp16 (16-bit values between the workers)");

namespace distribute::bench {
namespace {

// The slowest rank's seconds for `unit`, over the ranks of `comm`.
double slowest(const std::function<void()>& unit, MPI_Comm comm) {
  MPI_Barrier(comm);
  const auto start = std::chrono::steady_clock::now();
  unit();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm);
  return seconds;
}

}  // namespace
}  // namespace distribute::bench

namespace {

// The flags as the benchmarks' options; what is wrong with them, if anything, in `error`.
distribute::bench::Options options_from_flags(const std::vector<char*>& extra, std::string& error) {
  distribute::bench::Options options;
  options.replicas = {absl::GetFlag(FLAGS_replicas)};
  options.min_bytes = absl::GetFlag(FLAGS_min_bytes).value;
  options.max_bytes = absl::GetFlag(FLAGS_max_bytes).value;
  options.factor = static_cast<std::size_t>(std::max(absl::GetFlag(FLAGS_factor), 0));
  options.iters = absl::GetFlag(FLAGS_iters);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.check = absl::GetFlag(FLAGS_check);
  options.ops = absl::GetFlag(FLAGS_ops);
  if (extra.size() > 1) {
    error = "unexpected argument '" + std::string(extra[1]) + "'";
  } else if (options.min_bytes == 0 || options.min_bytes > options.max_bytes) {
    error = "need 0 < --min_bytes <= --max_bytes";
  } else if (options.replicas[0] < 1 || options.factor < 2 || options.iters < 1 || options.warmup < 0 ||
             options.ops < 0) {
    error = "need --replicas >= 1, --factor >= 2, --iters >= 1, --warmup >= 0, --ops >= 0";
  } else {
    try {
      distribute::parse_compression(absl::GetFlag(FLAGS_compression));
    } catch (const distribute::Error& e) {
      error = std::string("--compression: ") + e.what();
    }
  }
  return options;
}

// Everything between MPI_Init_thread and MPI_Finalize, so that the strategy is gone before MPI.
int run(const distribute::bench::Options& options) {
  using namespace distribute;
  using namespace distribute::bench;
  int rank = 0;
  int processes = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  if (processes != 2 && processes != 4) {
    if (rank == 0) std::fprintf(stderr, "multiworker_all_reduce_bench: launch 4 processes (or 2), not %d\n", processes);
    return 2;
  }
  const int local = options.replicas[0];
  const int flat = processes == 4 ? 4 : 0;
  const std::vector<std::size_t> sizes = sweep_sizes(options);

  std::vector<double> memcpy_bw(sizes.size());
  if (rank == 0) {
    print_preamble("multiworker_all_reduce_bench", options);
    MemcpyBaseline baseline(sizes.back());
    for (std::size_t s = 0; s < sizes.size(); ++s) memcpy_bw[s] = baseline.bandwidth(sizes[s], options);
  }
  sleeping_barrier();

  // Ranks 0 and 1 are the library's workers and the 2-process MPI rows' ranks.
  const bool pair = rank < 2;
  MPI_Comm pair_comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, pair ? 0 : MPI_UNDEFINED, rank, &pair_comm);
  std::optional<MultiWorkerMirroredStrategy> strategy;
  if (pair) {
    MultiWorkerMirroredStrategyOptions strategy_options;
    for (int l = 0; l < local; ++l) strategy_options.local_devices.push_back("CPU:" + std::to_string(l));
    strategy_options.communication.compression = parse_compression(absl::GetFlag(FLAGS_compression));
    strategy_options.cluster_resolver = mpi_cluster_resolver(pair_comm);
    strategy.emplace(strategy_options);
  }
  const int n = 2 * local;

  std::vector<Row> library_rows;
  std::vector<Row> pair_rows;
  std::vector<Row> flat_rows;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const auto count = static_cast<std::int64_t>(std::max<std::size_t>(sizes[s] / sizeof(float), 1));
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
    const int ops = ops_per_unit(bytes, options);
    std::vector<float> buffer(static_cast<std::size_t>(count), 0.0f);
    std::optional<PerReplica<Tensor>> inputs;
    if (pair) {
      inputs = strategy->experimental_distribute_values_from_function(
          [&](const ValueContext&) { return Tensor::zeros(DType::kFloat32, Shape{count}); });
    }
    const auto library_unit = [&] {
      strategy->run(
          [&](const Tensor& in) {
            for (int k = 0; k < ops; ++k) get_replica_context()->all_reduce(ReduceOp::kSum, in);
          },
          *inputs);
    };
    const auto mpi_unit = [&](MPI_Comm comm) {
      return [&, comm] {
        for (int k = 0; k < ops; ++k) {
          MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
        }
      };
    };
    std::vector<double> library_times;
    std::vector<double> pair_times;
    std::vector<double> flat_times;
    // Alternately, so that all three see the same machine; the warm-up rounds are not kept.
    for (int i = 0; i < options.warmup + options.iters; ++i) {
      const bool kept = i >= options.warmup;
      if (pair) {
        const double library = slowest(library_unit, pair_comm) / ops;
        const double raw = slowest(mpi_unit(pair_comm), pair_comm) / ops;
        if (kept) library_times.push_back(library);
        if (kept) pair_times.push_back(raw);
      }
      if (flat != 0) {
        sleeping_barrier();
        const double all = slowest(mpi_unit(MPI_COMM_WORLD), MPI_COMM_WORLD) / ops;
        if (kept) flat_times.push_back(all);
      }
    }
    const auto row = [&](const std::vector<double>& times, int ranks) {
      return Row{.bytes = bytes, .count = static_cast<std::size_t>(count), .seconds = times.empty() ? 0 : median(times),
                 .bus_factor = bus_factor(Collective::kAllReduce, ranks), .memcpy_bytes_per_s = memcpy_bw[s]};
    };
    Row library = row(library_times, n);
    if (options.check && pair) {
      PerReplica<Tensor> ones = strategy->experimental_distribute_values_from_function([&](const ValueContext& ctx) {
        return Tensor::from_vector<float>(
            std::vector<float>(static_cast<std::size_t>(count), static_cast<float>(ctx.replica_id_in_sync_group())),
            Shape{count});
      });
      PerReplica<Tensor> sums =
          strategy->run([](const Tensor& in) { return get_replica_context()->all_reduce(ReduceOp::kSum, in); }, ones);
      std::int64_t wrong = 0;
      for (const Tensor& t : sums.values()) {
        for (float v : t.to_vector<float>()) wrong += v != static_cast<float>(n * (n - 1) / 2) ? 1 : 0;
      }
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, pair_comm);
      library.wrong = wrong;
    }
    library_rows.push_back(library);
    pair_rows.push_back(row(pair_times, 2));
    flat_rows.push_back(row(flat_times, 4));
    sleeping_barrier();
  }
  if (rank == 0) {
    print_table_header("MultiWorkerMirroredStrategy all_reduce, 2 workers x " + std::to_string(local) + " replicas" +
                       ", compression " + absl::GetFlag(FLAGS_compression));
    for (const Row& row : library_rows) print_row(row);
    print_table_header("MPI_Allreduce in place, the same 2 processes (the cross-process step)");
    for (const Row& row : pair_rows) print_row(row);
    if (flat != 0) {
      print_table_header("MPI_Allreduce in place, 4 processes (flat, one per replica)");
      for (const Row& row : flat_rows) print_row(row);
    }
    std::printf("#\n# time ratios, higher is better for the library\n# %10s %16s %16s\n", "size",
                "2-process/library", flat != 0 ? "flat/library" : "");
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      std::printf("  %10zu %16.2f", library_rows[s].bytes, pair_rows[s].seconds / library_rows[s].seconds);
      if (flat != 0) std::printf(" %16.2f", flat_rows[s].seconds / library_rows[s].seconds);
      std::printf("\n");
    }
  }
  strategy.reset();
  if (pair_comm != MPI_COMM_NULL) MPI_Comm_free(&pair_comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before MPI starts, so that --help and a bad flag end every process at once.
  absl::SetProgramUsageMessage(
      "MultiWorkerMirroredStrategy all_reduce (float32, sum) by 2 workers beside MPI_Allreduce by the same 2 "
      "processes and by 4; launch with mpirun -np 4 (or 2).");
  const std::vector<char*> extra = absl::ParseCommandLine(argc, argv);
  std::string error;
  const distribute::bench::Options options = options_from_flags(extra, error);
  if (!error.empty()) {
    std::fprintf(stderr, "%s: %s; see --help\n", argv[0], error.c_str());
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int rc = run(options);
  MPI_Finalize();
  return rc;
}
