// The consumer of the install test: a 2-replica all_reduce through the installed headers and
// library, exiting non-zero unless every replica gets the sum and the installed config.h matches.
#include <cstdio>
#include <string>

#include <distribute/config.h>
#include <distribute/distribute.h>

int main() {
  distribute::MirroredStrategy strategy({"CPU:0", "CPU:1"});
  auto sums = strategy.run([] {
    distribute::ReplicaContext& ctx = *distribute::get_replica_context();
    const float value = static_cast<float>(ctx.replica_id_in_sync_group() + 1);
    return ctx.all_reduce(distribute::ReduceOp::kSum, distribute::Tensor::scalar(value));
  });
  for (const distribute::Tensor& sum : sums.values()) {
    if (sum.item<float>() != 3.0f) {
      std::fprintf(stderr, "consumer: all_reduce gave %g, expected 3\n", static_cast<double>(sum.item<float>()));
      return 1;
    }
  }
  // The installed config.h must describe the installed library.
  const std::string info = distribute::build_info();
  if (info.find(DISTRIBUTE_VERSION_STRING) == std::string::npos) {
    std::fprintf(stderr, "consumer: config.h says %s but the library says '%s'\n", DISTRIBUTE_VERSION_STRING, info.c_str());
    return 1;
  }
  std::printf("consumer: %s; all_reduce SUM over 2 replicas = 3\n", info.c_str());
  return 0;
}
