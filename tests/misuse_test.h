// What the files of misuse_test share: its fixtures, each test under a watchdog, and the correct
// step that a strategy must still run right after a misuse.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute::testing {

// Every test of these fixtures runs under a watchdog for its whole lifetime.
template <class Base>
class Guarded : public Base {
 private:
  static constexpr std::chrono::milliseconds kHangLimit{10000};
  Watchdog watchdog_{kHangLimit, current_test_name()};
};

class Misuse : public Guarded<::testing::Test> {};

// Every misuse runs against both backends of CPU replicas: shared memory, and the reduction to
// one device (whose barriers and ordering marks GPU replicas use too).
class MisuseAcrossReplicas : public Guarded<::testing::TestWithParam<std::tuple<int, CrossDeviceOps>>> {
 protected:
  int n() const { return std::get<0>(GetParam()); }
  int last() const { return n() - 1; }
  MirroredStrategyOptions options() const {
    MirroredStrategyOptions o;
    o.cross_device_ops = std::get<1>(GetParam());
    return o;
  }
  // "replicas 0, 1" for the replicas other than the last one.
  std::string all_but_last() const { return replicas_text(replicas_except(n(), {last()})); }
};

// One correct step with every kind of collective; checks every replica's results exactly.
inline void expect_healthy(Strategy& strategy) {
  const int n = strategy.num_replicas_in_sync();
  auto results = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int id = ctx.replica_id_in_sync_group();
    const float sum = ctx.all_reduce(ReduceOp::kSum, static_cast<float>(id + 1));
    // Replica r contributes r + 1 copies of r: the sizes along the axis differ.
    const Tensor gathered = ctx.all_gather(
        Tensor::from_vector<std::int32_t>(std::vector<std::int32_t>(static_cast<std::size_t>(id + 1), id)), 0);
    const int merged = ctx.merge_call(
        [](Strategy&, const PerReplica<int>& ids) {
          return std::accumulate(ids.values().begin(), ids.values().end(), 0);
        },
        id);
    return std::tuple{sum, gathered.to_vector<std::int32_t>(), merged};
  });
  std::vector<std::int32_t> expected_gather;
  for (int r = 0; r < n; ++r) expected_gather.insert(expected_gather.end(), static_cast<std::size_t>(r + 1), r);
  ASSERT_EQ(results.num_replicas(), n);
  for (int r = 0; r < n; ++r) {
    const auto& [sum, gathered, merged] = results[r];
    EXPECT_EQ(sum, static_cast<float>(n * (n + 1) / 2)) << "replica " << r;
    EXPECT_EQ(gathered, expected_gather) << "replica " << r;
    EXPECT_EQ(merged, n * (n - 1) / 2) << "replica " << r;
  }
}


}  // namespace distribute::testing
