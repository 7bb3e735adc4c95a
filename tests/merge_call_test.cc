// ReplicaContext::merge_call: merge_fn runs once per call in the strategy's cross-replica context,
// sees every replica's arguments in replica order, and its result comes back to every replica,
// with PerReplica / Mirrored parts unpacked to the replica's own component (also inside tuples,
// pairs, vectors and maps). Also: several merge_calls per step, merge_call in the default context,
// every cross-replica Strategy method inside merge_fn (a nested run included), and a merge_fn that
// throws.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::Watchdog;

constexpr std::chrono::milliseconds kHangLimit{20000};

struct MergeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class MergeCall : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
  std::vector<int> ids() const {
    std::vector<int> v;
    for (int r = 0; r < n(); ++r) v.push_back(r);
    return v;
  }
};

INSTANTIATE_TEST_SUITE_P(Replicas, MergeCall, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "replicas"; });

TEST_P(MergeCall, MergeFnRunsOnceInCrossReplicaContextWithArgumentsInReplicaOrder) {
  MirroredStrategy strategy(cpu_devices(n()));
  std::atomic<int> calls{0};
  std::vector<int> seen_ids;
  std::vector<std::string> seen_names;
  bool replica_context_null = false;
  const Strategy* cross_replica = nullptr;
  const Strategy* received = nullptr;
  PerReplica<int> result = strategy.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    return ctx.merge_call(
        [&](Strategy& s, const PerReplica<int>& id, const PerReplica<std::string>& name) {
          calls.fetch_add(1);
          seen_ids = id.values();
          seen_names = name.values();
          replica_context_null = get_replica_context() == nullptr;
          cross_replica = get_cross_replica_context();
          received = &s;
          int total = 0;
          for (int v : id.values()) total += v;
          return total;
        },
        r, "replica" + std::to_string(r));
  });
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(seen_ids, ids());
  ASSERT_EQ(seen_names.size(), static_cast<std::size_t>(n()));
  for (int r = 0; r < n(); ++r) EXPECT_EQ(seen_names[static_cast<std::size_t>(r)], "replica" + std::to_string(r));
  EXPECT_TRUE(replica_context_null);
  EXPECT_EQ(cross_replica, &strategy);
  EXPECT_EQ(received, &strategy);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(result[r], n() * (n() - 1) / 2);
}

TEST_P(MergeCall, ReplicasAreBackInTheirOwnContextAfterMergeCall) {
  MirroredStrategy strategy(cpu_devices(n()));
  PerReplica<std::pair<const ReplicaContext*, const ReplicaContext*>> contexts = strategy.run([&] {
    ReplicaContext* before = get_replica_context();
    before->merge_call([](Strategy&) {});
    EXPECT_EQ(get_cross_replica_context(), nullptr);
    EXPECT_FALSE(in_cross_replica_context());
    return std::pair<const ReplicaContext*, const ReplicaContext*>(before, get_replica_context());
  });
  for (int r = 0; r < n(); ++r) {
    EXPECT_NE(contexts[r].first, nullptr);
    EXPECT_EQ(contexts[r].first, contexts[r].second) << r;
  }
}

TEST_P(MergeCall, TensorArgumentsAndResult) {
  MirroredStrategy strategy(cpu_devices(n()));
  PerReplica<Tensor> result = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Tensor mine = Tensor::from_vector<float>({float(r), float(10 * r)});
    return get_replica_context()->merge_call(
        [](Strategy& s, const PerReplica<Tensor>& v) { return s.reduce(ReduceOp::kSum, v, std::nullopt); }, mine);
  });
  const float sum = n() * (n() - 1) / 2.0f;
  for (int r = 0; r < n(); ++r) EXPECT_EQ(result[r].to_vector<float>(), (std::vector<float>{sum, 10 * sum}));
}

TEST_P(MergeCall, PerReplicaResultIsUnpacked) {
  MirroredStrategy strategy(cpu_devices(n()));
  PerReplica<int> result = strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    return get_replica_context()->merge_call(
        [](Strategy&, const PerReplica<int>& v) {
          std::vector<int> squares;
          for (int x : v.values()) squares.push_back(x * x);
          return PerReplica<int>(squares);
        },
        r);
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(result[r], r * r);
}

TEST_P(MergeCall, MirroredResultIsUnpacked) {
  MirroredStrategy strategy(cpu_devices(n()));
  PerReplica<Tensor> result = strategy.run([] {
    return get_replica_context()->merge_call([](Strategy& s) {
      std::vector<Tensor> copies;
      for (int r = 0; r < s.num_replicas_in_sync(); ++r) {
        copies.push_back(Tensor::from_vector<std::int32_t>({r, 5}, Shape{2}, Device::cpu(r)));
      }
      return Mirrored<Tensor>(copies);
    });
  });
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(result[r].device(), Device::cpu(r));
    EXPECT_EQ(result[r].to_vector<std::int32_t>(), (std::vector<std::int32_t>{r, 5}));
  }
}

TEST_P(MergeCall, PerReplicaInsideTupleAndPairIsUnpacked) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto result = strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    auto [own, shared, nested] = get_replica_context()->merge_call(
        [](Strategy&, const PerReplica<int>& v) {
          std::vector<int> plus_one;
          std::vector<std::string> names;
          for (int x : v.values()) {
            plus_one.push_back(x + 1);
            names.push_back("r" + std::to_string(x));
          }
          return std::make_tuple(PerReplica<int>(plus_one), 99,
                                 std::make_pair(PerReplica<std::string>(names), std::string("all")));
        },
        r);
    static_assert(std::is_same_v<decltype(own), int>);
    static_assert(std::is_same_v<decltype(nested), std::pair<std::string, std::string>>);
    return std::make_tuple(own, shared, nested.first, nested.second);
  });
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(std::get<0>(result[r]), r + 1);
    EXPECT_EQ(std::get<1>(result[r]), 99);
    EXPECT_EQ(std::get<2>(result[r]), "r" + std::to_string(r));
    EXPECT_EQ(std::get<3>(result[r]), "all");
  }
}

TEST_P(MergeCall, PerReplicaInsideVectorAndMapIsUnpacked) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto result = strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    return get_replica_context()->merge_call(
        [](Strategy&, const PerReplica<int>& v) {
          std::vector<int> doubled;
          for (int x : v.values()) doubled.push_back(2 * x);
          std::map<std::string, PerReplica<int>> out;
          out.emplace("id", v);
          out.emplace("doubled", PerReplica<int>(doubled));
          return std::vector<std::map<std::string, PerReplica<int>>>{out, out};
        },
        r);
  });
  for (int r = 0; r < n(); ++r) {
    const std::vector<std::map<std::string, int>>& mine = result[r];
    ASSERT_EQ(mine.size(), 2u);
    for (const auto& m : mine) EXPECT_EQ(m, (std::map<std::string, int>{{"doubled", 2 * r}, {"id", r}}));
  }
}

TEST_P(MergeCall, SeveralMergeCallsPerStep) {
  MirroredStrategy strategy(cpu_devices(n()));
  std::atomic<int> calls{0};
  std::vector<int> order;
  PerReplica<std::vector<int>> result = strategy.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    std::vector<int> got;
    for (int step = 0; step < 5; ++step) {
      got.push_back(ctx.merge_call(
          [&](Strategy&, const PerReplica<int>& v, const PerReplica<int>& s) {
            calls.fetch_add(1);
            order.push_back(s[0]);
            int total = 0;
            for (int x : v.values()) total += x;
            return total;
          },
          r * step, step));
      // A collective between merge_calls keeps its place in the sequence.
      got.push_back(static_cast<int>(ctx.all_reduce(ReduceOp::kSum, std::int64_t{1})));
    }
    return got;
  });
  EXPECT_EQ(calls.load(), 5);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  const int ids_sum = n() * (n() - 1) / 2;
  std::vector<int> expected;
  for (int step = 0; step < 5; ++step) expected.insert(expected.end(), {ids_sum * step, n()});
  for (int r = 0; r < n(); ++r) EXPECT_EQ(result[r], expected);
}

TEST_P(MergeCall, MergeFnUsesTheCrossReplicaStrategyMethods) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto result = strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Tensor rows = Tensor::from_vector<float>({float(r), float(r + 1)}, Shape{1, 2});
    return get_replica_context()->merge_call(
        [](Strategy& s, const PerReplica<Tensor>& v) {
          Tensor mean = s.reduce("MEAN", v, std::nullopt);
          Tensor sum_axis0 = s.reduce(ReduceOp::kSum, v, 0);
          Tensor gathered = s.gather(v, 0);
          Tensor to_device = s.extended().reduce_to(ReduceOp::kSum, v, Device::cpu(0));
          std::vector<Tensor> batch =
              s.extended().batch_reduce_to(ReduceOp::kMean, {{v, Device::cpu(0)}, {v, Device::cpu(0)}});
          Tensor gathered_to = s.extended().gather_to(v, Device::cpu(0), 1);
          return std::make_tuple(mean, sum_axis0, gathered, to_device, batch, gathered_to);
        },
        rows);
  });
  std::vector<float> gathered;
  float ids = 0;
  for (int r = 0; r < n(); ++r) {
    gathered.insert(gathered.end(), {float(r), float(r + 1)});
    ids += float(r);
  }
  const float mean0 = ids / float(n());
  for (int r = 0; r < n(); ++r) {
    const auto& [mean, sum_axis0, gath, to_device, batch, gathered_to] = result[r];
    EXPECT_EQ(mean.to_vector<float>(), (std::vector<float>{mean0, mean0 + 1}));
    EXPECT_EQ(sum_axis0.to_vector<float>(), (std::vector<float>{ids, ids + float(n())}));
    EXPECT_EQ(gath.shape(), (Shape{n(), 2}));
    EXPECT_EQ(gath.to_vector<float>(), gathered);
    EXPECT_EQ(to_device.to_vector<float>(), (std::vector<float>{ids, ids + float(n())}));
    ASSERT_EQ(batch.size(), 2u);
    EXPECT_EQ(batch[1].to_vector<float>(), (std::vector<float>{mean0, mean0 + 1}));
    EXPECT_EQ(gathered_to.shape(), (Shape{1, 2 * n()}));
    // Concatenating [r, r+1] rows along axis 1 interleaves: r0, r0+1, r1, r1+1, ...
    EXPECT_EQ(gathered_to.to_vector<float>(), gathered);
  }
}

// TF allows a run from a merge_fn; its replicas are separate from the paused ones.
TEST_P(MergeCall, MergeFnRunsANestedRun) {
  Watchdog watchdog(kHangLimit, "MergeCall.MergeFnRunsANestedRun");
  MirroredStrategy strategy(cpu_devices(n()));
  std::vector<std::thread::id> nested_threads;
  std::thread::id merge_thread;
  auto result = strategy.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    const std::thread::id outer_thread = std::this_thread::get_id();
    int value = ctx.merge_call(
        [&](Strategy& s, const PerReplica<int>& outer_ids) {
          merge_thread = std::this_thread::get_id();
          PerReplica<std::pair<int, std::thread::id>> inner = s.run(
              [](int outer_id) {
                ReplicaContext& inner_ctx = *get_replica_context();
                // A collective among the nested replicas while the outer ones are paused.
                int sum = inner_ctx.all_reduce(ReduceOp::kSum, outer_id + 100);
                return std::make_pair(sum + inner_ctx.replica_id_in_sync_group(), std::this_thread::get_id());
              },
              outer_ids);
          std::vector<int> values;
          for (const auto& [v, thread] : inner.values()) {
            values.push_back(v);
            nested_threads.push_back(thread);
          }
          return PerReplica<int>(values);
        },
        r);
    return std::make_pair(value, outer_thread);
  });
  const int expected_sum = n() * (n() - 1) / 2 + 100 * n();
  std::set<std::thread::id> outer;
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(result[r].first, expected_sum + r);
    outer.insert(result[r].second);
  }
  ASSERT_EQ(nested_threads.size(), static_cast<std::size_t>(n()));
  // Nested replica 0 runs on the nested run's caller, the thread running merge_fn; the others on
  // threads of their own, never on a paused outer replica's.
  EXPECT_EQ(nested_threads[0], merge_thread);
  for (std::size_t r = 1; r < nested_threads.size(); ++r) {
    EXPECT_EQ(outer.count(nested_threads[r]), 0u) << "nested replica " << r << " reused a paused thread";
  }
  // The strategy is usable for a plain run afterwards.
  PerReplica<int> after = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1); });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(after[r], n());
}

TEST_P(MergeCall, MergeFnThatThrowsReachesTheCallerWithItsType) {
  Watchdog watchdog(kHangLimit, "MergeCall.MergeFnThatThrowsReachesTheCallerWithItsType");
  MirroredStrategy strategy(cpu_devices(n()));
  std::atomic<int> returned{0};
  std::atomic<int> aborted{0};
  std::atomic<int> original{0};
  try {
    strategy.run([&] {
      try {
        get_replica_context()->merge_call([](Strategy&) -> int { throw MergeError("merge failed on purpose"); });
      } catch (const AbortedError& e) {
        // The replicas are released with an error that quotes merge_fn's.
        if (std::string(e.what()).find("merge failed on purpose") != std::string::npos) aborted.fetch_add(1);
        throw;
      } catch (const MergeError&) {
        original.fetch_add(1);
        throw;
      }
      returned.fetch_add(1);
    });
    ADD_FAILURE() << "run did not throw";
  } catch (MergeError& e) {
    EXPECT_STREQ(e.what(), "merge failed on purpose");
  }
  // No replica returns from the failed merge_call; at most the one whose thread ran merge_fn sees
  // the original exception, every other one an AbortedError.
  EXPECT_EQ(returned.load(), 0);
  EXPECT_LE(original.load(), 1);
  EXPECT_EQ(aborted.load() + original.load(), n());

  // The strategy stays usable.
  PerReplica<int> ok = strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    return get_replica_context()->merge_call([](Strategy&, const PerReplica<int>& v) { return v; }, r * 3);
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(ok[r], r * 3);
}

TEST(MergeCallDefaultContext, CallsMergeFnDirectlyInCrossReplicaContext) {
  Strategy& default_strategy = get_strategy();
  int calls = 0;
  const std::thread::id caller = std::this_thread::get_id();
  auto result = get_replica_context()->merge_call(
      [&](Strategy& s, const PerReplica<int>& v, const PerReplica<double>& d) {
        ++calls;
        EXPECT_EQ(&s, &default_strategy);
        EXPECT_EQ(get_replica_context(), nullptr);
        EXPECT_EQ(get_cross_replica_context(), &default_strategy);
        EXPECT_TRUE(in_cross_replica_context());
        EXPECT_EQ(std::this_thread::get_id(), caller);
        EXPECT_EQ(v.values(), std::vector<int>{4});
        EXPECT_EQ(d.values(), std::vector<double>{0.5});
        return std::make_pair(PerReplica<int>({v[0] * 10}), d[0]);
      },
      4, 0.5);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(result, std::make_pair(40, 0.5));
  // Back in the default replica context.
  ASSERT_NE(get_replica_context(), nullptr);
  EXPECT_EQ(get_cross_replica_context(), nullptr);
}

TEST(MergeCallDefaultContext, MergeFnThatThrowsPropagates) {
  EXPECT_THROW(get_replica_context()->merge_call([](Strategy&) { throw MergeError("direct"); }), MergeError);
  EXPECT_NE(get_replica_context(), nullptr);
  EXPECT_EQ(get_cross_replica_context(), nullptr);
}

TEST(MergeCallOneDevice, CallsMergeFnOnceOnTheCallingThread) {
  OneDeviceStrategy strategy("CPU:0");
  const std::thread::id caller = std::this_thread::get_id();
  PerReplica<std::pair<int, bool>> result = strategy.run([&] {
    int calls = 0;
    int value = get_replica_context()->merge_call(
        [&](Strategy& s, const PerReplica<int>& v) {
          ++calls;
          return s.reduce(ReduceOp::kSum, v, std::nullopt) + (std::this_thread::get_id() == caller ? 100 : 0);
        },
        7);
    return std::make_pair(value, calls == 1);
  });
  EXPECT_EQ(result[0].first, 107);
  EXPECT_TRUE(result[0].second);
}

}  // namespace
}  // namespace distribute
