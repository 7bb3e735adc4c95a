// What the always-on collective fingerprints cost: all_reduce of small and large float32 tensors
// with the replicas' calls compared (the default) and not compared, in the same process, on the
// same inputs, alternating the two settings so machine noise hits both alike.
//
//   ./build/default/bench/fingerprint_bench --replicas 2,4 --iters 15
#include <cstdio>
#include <vector>

#include "replica_bench.h"
#include "distribute/collective/signature.h"
#include "distribute/distribute.h"

namespace distribute::bench {
namespace {

void measure(int n, std::size_t bytes, const Options& options) {
  MirroredStrategy strategy(cpu_devices(n));
  const auto count = static_cast<std::int64_t>(bytes / sizeof(float));
  auto inputs = strategy.experimental_distribute_values_from_function([&](const ValueContext& ctx) {
    return Tensor::zeros(DType::kFloat32, Shape{count}, Device::cpu(ctx.replica_id_in_sync_group()));
  });
  const int ops = ops_per_unit(bytes, options);
  auto unit = [&] {
    strategy.run([ops](const Tensor& x) {
      for (int k = 0; k < ops; ++k) (void)get_replica_context()->all_reduce(ReduceOp::kSum, x);
    }, inputs);
  };
  std::vector<double> on, off;
  Options one = options;
  one.iters = 1;
  for (int repeat = 0; repeat < std::max(options.iters, 5); ++repeat) {
    collective::set_fingerprint_checks(true);
    on.push_back(time_unit(unit, ops, one).median_s);
    collective::set_fingerprint_checks(false);
    off.push_back(time_unit(unit, ops, one).median_s);
  }
  collective::set_fingerprint_checks(true);
  const double t_on = median(on), t_off = median(off);
  std::printf("%8d %12s %14.3f %14.3f %10.3f\n", n, format_bytes(bytes).c_str(), t_on * 1e6, t_off * 1e6,
              t_on / t_off);
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  using namespace distribute::bench;
  Options options = parse_options(argc, argv, "all_reduce with fingerprint checks on and off", {2, 4});
  std::printf("# fingerprint cost: median time per all_reduce (us), checks on / off, same run\n");
  std::printf("%8s %12s %14s %14s %10s\n", "replicas", "size", "on (us)", "off (us)", "on/off");
  for (int n : options.replicas) {
    for (std::size_t bytes : {std::size_t{4}, 4 * kKiB, 4 * kMiB, 64 * kMiB}) measure(n, bytes, options);
  }
}
