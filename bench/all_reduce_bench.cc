// all_reduce through the public API: for each replica count N, a MirroredStrategy over CPU:0..N-1;
// one timed repeat is one strategy.run in which every replica calls
// get_replica_context()->all_reduce(kSum, x) on a float32 tensor of S bytes K times. Reports the
// time per all_reduce, algbw, busbw, the wrong elements of the last result and the ratio to the
// same-run 2-thread memcpy bandwidth.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "replica_bench.h"

namespace distribute::bench {
namespace {

void bench_replicas(int n, const std::vector<std::size_t>& sizes, MemcpyTable& baseline,
                    const Options& options) {
  MirroredStrategy strategy(cpu_devices(n));
  print_table_header("all_reduce, " + std::to_string(n) + " replicas (" + strategy.name() + ")");
  Summary summary;
  for (const std::size_t size : sizes) {
    const std::size_t count = std::max<std::size_t>(size / sizeof(float), 1);
    const std::size_t bytes = count * sizeof(float);
    PerReplica<Tensor> inputs = make_inputs(strategy, count);
    std::vector<Tensor> results(static_cast<std::size_t>(n));
    const int ops = ops_per_unit(bytes, options);
    const Timing t = time_all_reduce(strategy, inputs, results, ops, options);
    Row row{.bytes = bytes,
            .count = count,
            .seconds = t.median_s,
            .bus_factor = bus_factor(Collective::kAllReduce, n),
            .memcpy_bytes_per_s = baseline.at(bytes)};
    if (options.check) {
      PerReplica<std::int64_t> wrong = strategy.run([&] {
        const int id = get_replica_context()->replica_id_in_sync_group();
        const float* out = results[static_cast<std::size_t>(id)].data<float>();
        std::int64_t bad = 0;
        for (std::size_t i = 0; i < count; ++i) bad += out[i] != expected_sum(n, i) ? 1 : 0;
        return bad;
      });
      row.wrong = 0;
      for (std::int64_t w : wrong.values()) *row.wrong += w;
    }
    print_row(row);
    summary.add(row);
  }
  summary.print("all_reduce N=" + std::to_string(n));
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  using namespace distribute::bench;
  const Options options = parse_options(argc, argv, "all_reduce (float32, sum) through MirroredStrategy::run",
                                        {2, 4, 8});
  print_preamble(("all_reduce_bench: " + distribute::build_info()).c_str(), options);
  const std::vector<std::size_t> sizes = sweep_sizes(options);
  MemcpyTable baseline(sizes, options);
  for (int n : options.replicas) bench_replicas(n, sizes, baseline, options);
  return 0;
}
