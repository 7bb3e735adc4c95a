// all_gather along axis 0 through the public API: for each replica count N, a MirroredStrategy
// over CPU:0..N-1; one timed repeat is one strategy.run in which every replica calls
// get_replica_context()->all_gather(x, 0) K times on a float32 tensor of S/N bytes, S being the
// gathered size (rounded down to a multiple of 4N bytes, at least 4N). Reports like all_reduce_bench.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "replica_bench.h"
#include "distribute/distribute.h"

namespace distribute::bench {
namespace {

// Distinct per replica and position, and exact in float32.
float input_value(int replica, std::size_t i) { return static_cast<float>(replica * 1000 + static_cast<int>(i % 997)); }

void bench_replicas(int n, const std::vector<std::size_t>& sizes, MemcpyTable& baseline,
                    const Options& options) {
  MirroredStrategy strategy(cpu_devices(n));
  print_table_header("all_gather (axis 0), " + std::to_string(n) + " replicas (" + strategy.name() +
                     "); size = gathered bytes");
  Summary summary;
  std::size_t previous_count = 0;
  for (const std::size_t size : sizes) {
    const std::size_t unit = sizeof(float) * static_cast<std::size_t>(n);
    const std::size_t per_replica = std::max<std::size_t>(size / unit, 1);
    // Small sizes round up to the same gathered size; measure it once.
    if (per_replica == previous_count) continue;
    previous_count = per_replica;
    PerReplica<Tensor> inputs = strategy.run([per_replica] {
      ReplicaContext& ctx = *get_replica_context();
      Tensor t = Tensor::empty(DType::kFloat32, Shape{static_cast<std::int64_t>(per_replica)}, ctx.device());
      float* data = t.data<float>();
      for (std::size_t i = 0; i < per_replica; ++i) data[i] = input_value(ctx.replica_id_in_sync_group(), i);
      return t;
    });
    std::vector<Tensor> results(static_cast<std::size_t>(n));
    const std::size_t bytes = per_replica * unit;
    const int ops = ops_per_unit(bytes, options);
    const Timing t = time_all_gather(strategy, inputs, results, 0, ops, options);
    Row row{.bytes = bytes,
            .count = per_replica * static_cast<std::size_t>(n),
            .redop = "none",
            .seconds = t.median_s,
            .bus_factor = bus_factor(Collective::kAllGather, n),
            .memcpy_bytes_per_s = baseline.at(bytes)};
    if (options.check) {
      PerReplica<std::int64_t> wrong = strategy.run([&] {
        const int id = get_replica_context()->replica_id_in_sync_group();
        const Tensor& result = results[static_cast<std::size_t>(id)];
        if (result.num_elements() != static_cast<std::int64_t>(per_replica) * n) return std::int64_t{-1};
        const float* out = result.data<float>();
        std::int64_t bad = 0;
        for (int r = 0; r < n; ++r) {
          for (std::size_t i = 0; i < per_replica; ++i) {
            bad += out[static_cast<std::size_t>(r) * per_replica + i] != input_value(r, i) ? 1 : 0;
          }
        }
        return bad;
      });
      row.wrong = 0;
      for (std::int64_t w : wrong.values()) {
        *row.wrong += w < 0 ? static_cast<std::int64_t>(per_replica) * n : w;
      }
    }
    print_row(row);
    summary.add(row);
  }
  summary.print("all_gather N=" + std::to_string(n));
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  using namespace distribute::bench;
  const Options options =
      parse_options(argc, argv, "all_gather (float32, axis 0) through MirroredStrategy::run", {2, 4, 8});
  print_preamble(("all_gather_bench: " + distribute::build_info()).c_str(), options);
  const std::vector<std::size_t> sizes = sweep_sizes(options);
  MemcpyTable baseline(sizes, options);
  for (int n : options.replicas) bench_replicas(n, sizes, baseline, options);
  return 0;
}
