// MultiWorkerMirroredStrategy's all_reduce beside raw MPI, in one launch on two processes:
//   mpirun -np 2 --bind-to none ./build/default/bench/multiworker_all_reduce_bench
// For each size, alternately: the library's all_reduce (float32, sum) by 2 workers x 2 local
// replicas (--local 2), and raw MPI_Allreduce in place by the 2 processes on a buffer of the
// same size (the cross-process step the library's one thread per worker performs). nccl-tests
// columns, with the same-run 2-thread memcpy bandwidth measured by rank 0 while rank 1 sleeps.
// busbw counts the library's 4 replicas and MPI's 2 ranks. The flat 4-process MPI_Allreduce is
// mpi_all_reduce_bench under `mpirun -np 4`.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "mpi_barrier.h"
#include "distribute/distribute.h"

namespace distribute::bench {
namespace {

// The slowest rank's seconds for `unit`.
double slowest(const std::function<void()>& unit) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  unit();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

}  // namespace
}  // namespace distribute::bench

namespace {

// Everything between MPI_Init_thread and MPI_Finalize, so that the strategy is gone before MPI.
int run(int argc, char** argv) {
  using namespace distribute;
  using namespace distribute::bench;
  int rank = 0;
  int workers = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &workers);
  Options options = parse_options(argc, argv,
                                  "MultiWorkerMirroredStrategy all_reduce (float32, sum) beside MPI_Allreduce; "
                                  "workers come from mpirun, --replicas L sets the local replicas (default 2)",
                                  {2});
  // Every rank must time as many repeats: no adaptive count.
  if (options.iters == 0) options.iters = 5;
  const int local = options.replicas.empty() ? 2 : options.replicas[0];
  const std::vector<std::size_t> sizes = sweep_sizes(options);

  std::vector<double> memcpy_bw(sizes.size());
  if (rank == 0) {
    print_preamble("multiworker_all_reduce_bench", options);
    MemcpyBaseline baseline(sizes.back());
    for (std::size_t s = 0; s < sizes.size(); ++s) memcpy_bw[s] = baseline.bandwidth(sizes[s], options);
  }
  sleeping_barrier();

  MultiWorkerMirroredStrategyOptions strategy_options;
  for (int l = 0; l < local; ++l) strategy_options.local_devices.push_back("CPU:" + std::to_string(l));
  MultiWorkerMirroredStrategy strategy(strategy_options);
  const int n = strategy.num_replicas_in_sync();

  std::vector<Row> library_rows;
  std::vector<Row> mpi_rows;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const auto count = static_cast<std::int64_t>(std::max<std::size_t>(sizes[s] / sizeof(float), 1));
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
    const int ops = ops_per_unit(bytes, options);
    PerReplica<Tensor> inputs = strategy.experimental_distribute_values_from_function(
        [&](const ValueContext&) { return Tensor::zeros(DType::kFloat32, Shape{count}); });
    PerReplica<Tensor> outputs = strategy.experimental_distribute_values_from_function(
        [&](const ValueContext&) { return Tensor::zeros(DType::kFloat32, Shape{count}); });
    std::vector<float> buffer(static_cast<std::size_t>(count), 0.0f);
    const auto library_unit = [&] {
      strategy.run(
          [&](const Tensor& in) {
            for (int k = 0; k < ops; ++k) get_replica_context()->all_reduce(ReduceOp::kSum, in);
          },
          inputs);
    };
    const auto mpi_unit = [&] {
      for (int k = 0; k < ops; ++k) {
        MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
    };
    for (int i = 0; i < options.warmup; ++i) {
      slowest(library_unit);
      slowest(mpi_unit);
    }
    std::vector<double> library_times;
    std::vector<double> mpi_times;
    for (int i = 0; i < options.iters; ++i) {  // alternately, so that both see the same machine
      library_times.push_back(slowest(library_unit) / ops);
      mpi_times.push_back(slowest(mpi_unit) / ops);
    }
    Row library{.bytes = bytes, .count = static_cast<std::size_t>(count), .seconds = median(library_times),
                .bus_factor = bus_factor(Collective::kAllReduce, n), .memcpy_bytes_per_s = memcpy_bw[s]};
    if (options.check) {
      PerReplica<Tensor> ones = strategy.experimental_distribute_values_from_function(
          [&](const ValueContext& ctx) {
            return Tensor::from_vector<float>(std::vector<float>(static_cast<std::size_t>(count),
                                                                 static_cast<float>(ctx.replica_id_in_sync_group())),
                                              Shape{count});
          });
      PerReplica<Tensor> sums =
          strategy.run([](const Tensor& in) { return get_replica_context()->all_reduce(ReduceOp::kSum, in); }, ones);
      std::int64_t wrong = 0;
      for (const Tensor& t : sums.values()) {
        for (float v : t.to_vector<float>()) wrong += v != static_cast<float>(n * (n - 1) / 2) ? 1 : 0;
      }
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      library.wrong = wrong;
    }
    library_rows.push_back(library);
    mpi_rows.push_back(Row{.bytes = bytes, .count = static_cast<std::size_t>(count), .seconds = median(mpi_times),
                           .bus_factor = bus_factor(Collective::kAllReduce, workers),
                           .memcpy_bytes_per_s = memcpy_bw[s]});
  }
  if (rank == 0) {
    print_table_header("MultiWorkerMirroredStrategy all_reduce, " + std::to_string(workers) + " workers x " +
                       std::to_string(local) + " replicas");
    for (const Row& row : library_rows) print_row(row);
    print_table_header("MPI_Allreduce in place, " + std::to_string(workers) + " ranks (the cross-process step)");
    for (const Row& row : mpi_rows) print_row(row);
    std::printf("#\n# %10s %14s\n", "size", "mpi/library");
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      std::printf("  %10zu %14.2f\n", library_rows[s].bytes, mpi_rows[s].seconds / library_rows[s].seconds);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int rc = run(argc, argv);
  MPI_Finalize();
  return rc;
}
