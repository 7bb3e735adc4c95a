// Soak test: up to 100k runs of mixed collectives on 4 CPU replicas (more replicas than this
// machine's cores), randomly sized, every result checked against values each replica can compute
// itself. It stops after 25 s of runs, well inside its 60 s ctest timeout on a loaded machine, yet
// must complete a minimum number of runs; a watchdog turns a hang into a failure. Scaled down
// under sanitizers, which slow every synchronisation.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "distribute/distribute.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kRuns = 5000;
constexpr int kMinRuns = 500;
#else
constexpr int kRuns = 100000;
constexpr int kMinRuns = 10000;
#endif
constexpr std::chrono::seconds kBudget{25};
constexpr int kReplicas = 4;

// What every replica does in step `step`: the kind of collective and the sizes are drawn from a
// generator seeded by the step, so all replicas agree without talking.
struct Plan {
  int kind;
  std::int64_t size;
  explicit Plan(int step) {
    std::mt19937 gen(static_cast<unsigned>(step));
    kind = static_cast<int>(gen() % 5);
    size = static_cast<std::int64_t>(gen() % 300);
  }
};

TEST(Soak, UpToHundredThousandMixedRuns) {
  testing::Watchdog watchdog(std::chrono::seconds(50), "soak test");
  MirroredStrategy strategy(testing::cpu_devices(kReplicas));
  std::int64_t wrong = 0;
  const auto stop = std::chrono::steady_clock::now() + kBudget;
  int step = 0;
  for (; step < kRuns && (step < kMinRuns || std::chrono::steady_clock::now() < stop); ++step) {
    const Plan plan(step);
    auto errors = strategy.run([&plan] {
      ReplicaContext* ctx = get_replica_context();
      const int id = ctx->replica_id_in_sync_group();
      const std::int64_t n = ctx->num_replicas_in_sync();
      std::int64_t bad = 0;
      switch (plan.kind) {
        case 0: {  // scalar all_reduce
          bad += ctx->all_reduce(ReduceOp::kSum, static_cast<std::int64_t>(id + 1)) != n * (n + 1) / 2;
          break;
        }
        case 1: {  // tensor all_reduce of a random size
          std::vector<float> v(static_cast<std::size_t>(plan.size), static_cast<float>(id));
          Tensor out = ctx->all_reduce(ReduceOp::kMean, Tensor::from_vector(v));
          for (float x : out.to_vector<float>()) bad += x != static_cast<float>(n - 1) / 2;
          break;
        }
        case 2: {  // all_gather with per-replica sizes that differ along the axis
          std::vector<std::int32_t> v(static_cast<std::size_t>(plan.size + id), id);
          Tensor out = ctx->all_gather(Tensor::from_vector(v), 0);
          bad += out.num_elements() != n * plan.size + n * (n - 1) / 2;
          break;
        }
        case 3: {  // a nest of mixed dtypes in one collective
          auto out = ctx->all_reduce(ReduceOp::kSum, std::make_tuple(Tensor::scalar(1.0), 2, std::vector<float>{3.0f, 4.0f}));
          bad += std::get<0>(out).item<double>() != n;
          bad += std::get<1>(out) != 2 * n;
          bad += std::get<2>(out)[1] != 4.0f * n;
          break;
        }
        default: {  // merge_call returning each replica its own value
          auto mine = ctx->merge_call(
              [](Strategy&, const PerReplica<int>& ids) {
                std::vector<int> doubled;
                for (int v : ids.values()) doubled.push_back(2 * v);
                return PerReplica<int>(doubled);
              },
              id);
          bad += mine != 2 * id;
          break;
        }
      }
      return bad;
    });
    for (std::int64_t e : errors.values()) wrong += e;
  }
  EXPECT_EQ(wrong, 0) << "over " << step << " runs";
}

}  // namespace
}  // namespace distribute
