// The Gloo consumer of the install test, built when the install has the gloo component
// (find_package(distribute CONFIG REQUIRED COMPONENTS gloo)): a MultiWorkerMirroredStrategy of the
// processes it is started as (RANK, WORLD_SIZE and DISTRIBUTE_RENDEZVOUS set by a shell loop), whose
// 2 local replicas per worker all_reduce 1.0 over Gloo.
#include <cstdio>

#include <distribute/distribute.h>

int main() {
  distribute::MultiWorkerMirroredStrategyOptions options;
  options.local_devices = {"CPU:0", "CPU:1"};
  options.backend = distribute::CollectiveBackend::kGloo;
  distribute::MultiWorkerMirroredStrategy strategy(options);
  const int n = strategy.num_replicas_in_sync();
  auto sums = strategy.run([] { return distribute::get_replica_context()->all_reduce(distribute::ReduceOp::kSum, 1.0f); });
  for (float sum : sums.values()) {
    if (sum != static_cast<float>(n)) {
      std::fprintf(stderr, "consumer_gloo: all_reduce gave %g, expected %d\n", static_cast<double>(sum), n);
      return 1;
    }
  }
  std::printf("consumer_gloo: %s; all_reduce SUM over %d replicas = %d\n", strategy.name().c_str(), n, n);
  return 0;
}
