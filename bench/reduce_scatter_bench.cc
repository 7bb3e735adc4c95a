// reduce_scatter through the public API beside all_reduce of the same S bytes, in the same run:
// for each replica count N, a MirroredStrategy over CPU:0..N-1; one timed repeat is one
// strategy.run in which every replica calls get_replica_context()->reduce_scatter(kSum, x) (or
// all_reduce) on a float32 tensor of S bytes K times. Reports reduce_scatter's time, algbw and busbw
// as nccl-tests does (algbw = S / time), the wrong elements of its last result, the ratio to the
// same-run 2-thread memcpy bandwidth, and its time over all_reduce's.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "replica_bench.h"

namespace distribute::bench {
namespace {

void bench_replicas(int n, const std::vector<std::size_t>& sizes, MemcpyTable& baseline, const Options& options) {
  MirroredStrategy strategy(cpu_devices(n));
  print_table_header("reduce_scatter, " + std::to_string(n) + " replicas (" + strategy.name() + ")");
  Summary summary;
  std::vector<std::pair<std::size_t, double>> ratios;
  for (const std::size_t size : sizes) {
    const std::size_t count = std::max<std::size_t>(size / sizeof(float), 1);
    const std::size_t bytes = count * sizeof(float);
    PerReplica<Tensor> inputs = make_inputs(strategy, count);
    std::vector<Tensor> shards(static_cast<std::size_t>(n));
    std::vector<Tensor> whole(static_cast<std::size_t>(n));
    const int ops = ops_per_unit(bytes, options);
    const Timing scattered = time_collective(strategy, inputs, shards, ops, options, PreviousResult::kHeld,
                                             [](ReplicaContext& ctx, const Tensor& in) {
                                               return ctx.reduce_scatter(ReduceOp::kSum, in);
                                             });
    const Timing reduced = time_all_reduce(strategy, inputs, whole, ops, options);
    Row row{.bytes = bytes,
            .count = count,
            .seconds = scattered.median_s,
            .bus_factor = bus_factor(Collective::kReduceScatter, n),
            .memcpy_bytes_per_s = baseline.at(bytes)};
    if (options.check) {
      std::int64_t wrong = 0;
      for (int r = 0; r < n; ++r) {
        const Shard shard = shard_of(static_cast<std::int64_t>(count), n, r);
        const float* out = shards[static_cast<std::size_t>(r)].data<float>();
        for (std::int64_t i = 0; i < shard.size; ++i) {
          wrong += out[i] != expected_sum(n, static_cast<std::size_t>(shard.begin + i)) ? 1 : 0;
        }
      }
      row.wrong = wrong;
    }
    print_row(row);
    summary.add(row);
    ratios.emplace_back(bytes, scattered.median_s / reduced.median_s);
  }
  summary.print("reduce_scatter N=" + std::to_string(n));
  std::printf("# reduce_scatter time / all_reduce time, same run, N=%d\n", n);
  for (const auto& [bytes, ratio] : ratios) std::printf("#   %12zu B  %.2f\n", bytes, ratio);
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  using namespace distribute::bench;
  const Options options = parse_options(argc, argv, "reduce_scatter (float32, sum) through MirroredStrategy::run, "
                                        "beside all_reduce", {2, 4});
  print_preamble(("reduce_scatter_bench: " + distribute::build_info()).c_str(), options);
  const std::vector<std::size_t> sizes = sweep_sizes(options);
  MemcpyTable baseline(sizes, options);
  for (int n : options.replicas) bench_replicas(n, sizes, baseline, options);
  return 0;
}
