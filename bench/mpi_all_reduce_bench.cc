// The comparison point for all_reduce_bench: MPI_Allreduce in place on float32 (sum) over the same
// sizes, one process per rank (run under mpirun), timed the same way (K operations per repeat,
// median over repeats of the slowest rank's time) with the same-run 2-thread memcpy baseline
// measured by rank 0 while the other ranks sleep. Does not use distribute.
#include <mpi.h>
#include <sched.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "mpi_barrier.h"

namespace distribute::bench {
namespace {

float input_value(int rank, std::size_t i) { return static_cast<float>(static_cast<int>(i % 7) + rank); }

float expected_sum(int n, std::size_t i) { return static_cast<float>(n * static_cast<int>(i % 7) + n * (n - 1) / 2); }

// mpirun binds each rank to a core by default; the baseline's two threads must be free to use
// two cores, as the replica threads of all_reduce_bench are. Measures with every CPU allowed,
// then restores the binding MPI chose.
std::vector<double> unbound_memcpy_bandwidths(const std::vector<std::size_t>& sizes, const Options& options) {
  cpu_set_t bound;
  CPU_ZERO(&bound);
  sched_getaffinity(0, sizeof(bound), &bound);
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int cpu = 0; cpu < get_nprocs() && cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &all);
  sched_setaffinity(0, sizeof(all), &all);
  std::vector<double> result;
  {
    MemcpyBaseline baseline(sizes.back());
    for (std::size_t bytes : sizes) result.push_back(baseline.bandwidth(bytes, options));
  }
  sched_setaffinity(0, sizeof(bound), &bound);
  return result;
}

// Seconds of the slowest rank for `ops` in-place all-reduces of `count` floats.
double timed_unit(std::vector<float>& buffer, int count, int ops) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < ops; ++k) {
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  using namespace distribute::bench;
  MPI_Init(&argc, &argv);
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const Options options = parse_options(
      argc, argv, "MPI_Allreduce (float32, sum, in place); ranks come from mpirun, --replicas is ignored", {});
  const std::vector<std::size_t> sizes = sweep_sizes(options);

  std::vector<double> memcpy_bw(sizes.size());
  if (rank == 0) {
    int version = 0;
    int subversion = 0;
    MPI_Get_version(&version, &subversion);
    char library[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(library, &length);
    std::string first_line(library, static_cast<std::size_t>(length));
    first_line = first_line.substr(0, first_line.find_first_of("\n,"));
    print_preamble(("mpi_all_reduce_bench: " + first_line + " (MPI " + std::to_string(version) + "." +
                    std::to_string(subversion) + ")")
                       .c_str(),
                   options);
    memcpy_bw = unbound_memcpy_bandwidths(sizes, options);
    print_table_header("MPI_Allreduce in place, " + std::to_string(n) + " ranks");
  }
  sleeping_barrier();

  Summary summary;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const int count = static_cast<int>(std::max<std::size_t>(sizes[s] / sizeof(float), 1));
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
    // Zeros while timing: repeated in-place sums of them stay finite and normal.
    std::vector<float> buffer(static_cast<std::size_t>(count), 0.0f);
    const int ops = ops_per_unit(bytes, options);
    for (int i = 0; i < options.warmup; ++i) timed_unit(buffer, count, ops);
    int repeats = options.iters;
    if (repeats == 0) {
      const double estimate = timed_unit(buffer, count, ops);
      repeats = static_cast<int>(std::clamp(0.3 / std::max(estimate, 1e-9), 3.0, 20.0));
      MPI_Bcast(&repeats, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    std::vector<double> per_op;
    for (int i = 0; i < repeats; ++i) per_op.push_back(timed_unit(buffer, count, ops) / ops);

    Row row{.bytes = bytes,
            .count = static_cast<std::size_t>(count),
            .seconds = median(per_op),
            .bus_factor = bus_factor(Collective::kAllReduce, n),
            .memcpy_bytes_per_s = memcpy_bw[s]};
    if (options.check) {
      for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = input_value(rank, i);
      MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      long long bad = 0;
      for (std::size_t i = 0; i < buffer.size(); ++i) bad += buffer[i] != expected_sum(n, i) ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      row.wrong = bad;
    }
    if (rank == 0) {
      print_row(row);
      summary.add(row);
    }
  }
  if (rank == 0) summary.print("MPI_Allreduce N=" + std::to_string(n));
  MPI_Finalize();
  return 0;
}
