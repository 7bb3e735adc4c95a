// Pieces the distribute benchmarks share (the MPI one does not use them): the CPU device list of
// a strategy and the timed units "K all_reduces inside one run" and "K all_gathers inside one run".
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "distribute/distribute.h"

namespace distribute::bench {

// {"CPU:0", ..., "CPU:n-1"}
inline std::vector<std::string> cpu_devices(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return devices;
}

// Replica r's element i of a benchmark's input: small integers, so every sum is exact in float32
// and a check can compare exactly.
inline float input_value(int replica, std::size_t i) {
  return static_cast<float>(static_cast<int>(i % 7) + replica);
}
// Element i of the SUM of every replica's input, over n replicas.
inline float expected_sum(int n, std::size_t i) {
  return static_cast<float>(n * static_cast<int>(i % 7) + n * (n - 1) / 2);
}
// Each replica's float32 input of `count` elements, filled on its own thread, so the pages belong
// to its device's pool.
inline PerReplica<Tensor> make_inputs(MirroredStrategy& strategy, std::size_t count) {
  return strategy.run([count] {
    ReplicaContext& ctx = *get_replica_context();
    Tensor t = Tensor::empty(DType::kFloat32, Shape{static_cast<std::int64_t>(count)}, ctx.device());
    float* data = t.data<float>();
    for (std::size_t i = 0; i < count; ++i) data[i] = input_value(ctx.replica_id_in_sync_group(), i);
    return t;
  });
}

// What a replica does with its previous result when it calls the collective again.
enum class PreviousResult {
  kHeld,     // held until the new one arrives (so two outputs alternate)
  kDropped,  // dropped first, as a raw NCCL loop reuses one receive buffer (its block is reused)
};

// Times runs in which every replica applies `collective` (ReplicaContext&, const V&) -> V to its
// component of `inputs` `ops` times; each replica's last result stays in results[replica].
template <class V, class Collective>
Timing time_collective(MirroredStrategy& strategy, const PerReplica<V>& inputs, std::vector<V>& results, int ops,
                       const Options& options, PreviousResult previous, Collective collective) {
  return time_unit(
      [&] {
        strategy.run(
            [&](const V& in) {
              ReplicaContext& ctx = *get_replica_context();
              V& result = results[static_cast<std::size_t>(ctx.replica_id_in_sync_group())];
              result = V();  // the previous repeat's result goes back to the pool first
              for (int k = 0; k < ops; ++k) {
                if (previous == PreviousResult::kDropped) result = V();
                result = collective(ctx, in);
              }
            },
            inputs);
      },
      ops, options);
}

// `ops` SUM all_reduces per run.
template <class V>
Timing time_all_reduce(MirroredStrategy& strategy, const PerReplica<V>& inputs, std::vector<V>& results, int ops,
                       const Options& options, PreviousResult previous = PreviousResult::kHeld) {
  return time_collective(strategy, inputs, results, ops, options, previous,
                         [](ReplicaContext& ctx, const V& in) { return ctx.all_reduce(ReduceOp::kSum, in); });
}

// `ops` all_gathers along `axis` per run.
template <class V>
Timing time_all_gather(MirroredStrategy& strategy, const PerReplica<V>& inputs, std::vector<V>& results, int axis,
                       int ops, const Options& options, PreviousResult previous = PreviousResult::kHeld) {
  return time_collective(strategy, inputs, results, ops, options, previous,
                         [axis](ReplicaContext& ctx, const V& in) { return ctx.all_gather(in, axis); });
}

}  // namespace distribute::bench
