// The MPI consumer of the install test, built when the install has the mpi component
// (find_package(distribute CONFIG REQUIRED COMPONENTS mpi)): a MultiWorkerMirroredStrategy of the
// processes it is started as, whose 2 local replicas per worker all_reduce 1.0.
#include <cstdio>

#include <distribute/distribute.h>

int main() {
  distribute::MultiWorkerMirroredStrategyOptions options;
  options.local_devices = {"CPU:0", "CPU:1"};
  distribute::MultiWorkerMirroredStrategy strategy(options);
  const int n = strategy.num_replicas_in_sync();
  auto sums = strategy.run([] { return distribute::get_replica_context()->all_reduce(distribute::ReduceOp::kSum, 1.0f); });
  for (float sum : sums.values()) {
    if (sum != static_cast<float>(n)) {
      std::fprintf(stderr, "consumer_mpi: all_reduce gave %g, expected %d\n", static_cast<double>(sum), n);
      return 1;
    }
  }
  std::printf("consumer_mpi: %s; all_reduce SUM over %d replicas = %d\n", strategy.name().c_str(), n, n);
  return 0;
}
