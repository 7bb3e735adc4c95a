// The small all_reduce path of CPU replicas (src/replica/small_all_reduce.h): values of up to 48
// bytes go in one cache line per replica. Results of every dtype and of mixed nests against sums
// each replica computes itself, over thousands of consecutive collectives (the lines alternate,
// so a line rewritten too early shows up as a wrong sum); peers late enough for the waiter to
// sleep; values just past the limit, which take the rendezvous; and what differs between replicas
// on this path still ends in the rendezvous's error naming the replicas.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;
using testing::Watchdog;

constexpr std::chrono::seconds kHangLimit{50};

class SmallAllReduce : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
  // Sum over replicas r of (r + k).
  std::int64_t sum_of(std::int64_t k) const { return n() * k + n() * (n() - 1) / 2; }
};

INSTANTIATE_TEST_SUITE_P(Replicas, SmallAllReduce, ::testing::Values(2, 3, 4, 8),
                         [](const auto& param_info) { return std::to_string(param_info.param) + "replicas"; });

TEST_P(SmallAllReduce, ThousandsOfConsecutiveMixedNests) {
  Watchdog watchdog(kHangLimit, "SmallAllReduce.ThousandsOfConsecutiveMixedNests");
  MirroredStrategy strategy(cpu_devices(n()));
  constexpr int kSteps = 3000;
  auto wrong = strategy.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const std::int64_t r = ctx.replica_id_in_sync_group();
    std::int64_t bad = 0;
    for (std::int64_t k = 0; k < kSteps; ++k) {
      // 4 + 8 + 4 + 24 = 40 bytes, each leaf from an 8-byte boundary: 48 bytes, the limit.
      auto value = std::make_tuple(static_cast<float>(r + k), static_cast<double>(r + 2 * k),
                                   static_cast<std::int32_t>(r + 3 * k),
                                   Tensor::from_vector<std::int64_t>({r + k, r - k, r * k}));
      auto [f, d, i, t] = ctx.all_reduce(k % 3 == 0 ? ReduceOp::kMean : ReduceOp::kSum, value);
      const std::vector<std::int64_t> ts = t.to_vector<std::int64_t>();
      const std::int64_t ids = n() * (n() - 1) / 2;
      if (k % 3 == 0) {
        bad += f != static_cast<float>(sum_of(k)) / static_cast<float>(n());
        bad += d != static_cast<double>(sum_of(2 * k)) / n();
        bad += i != static_cast<std::int32_t>(sum_of(3 * k) / n());
        bad += ts != std::vector<std::int64_t>{sum_of(k) / n(), (ids - n() * k) / n(), ids * k / n()};
      } else {
        bad += f != static_cast<float>(sum_of(k));
        bad += d != static_cast<double>(sum_of(2 * k));
        bad += i != sum_of(3 * k);
        bad += ts != std::vector<std::int64_t>{sum_of(k), ids - n() * k, ids * k};
      }
    }
    return bad;
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(wrong[r], 0) << "replica " << r;
}

TEST_P(SmallAllReduce, EveryDtype) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto results = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    return std::make_tuple(ctx.all_reduce(ReduceOp::kSum, Tensor::scalar(Half(static_cast<float>(r)))),
                           ctx.all_reduce(ReduceOp::kSum, Tensor::scalar(BFloat16(static_cast<float>(r)))),
                           ctx.all_reduce(ReduceOp::kSum, static_cast<std::int64_t>(r) << 40),
                           ctx.all_reduce(ReduceOp::kMean, Tensor::from_vector<float>({1.0f * r, 2.0f * r})));
  });
  const auto ids = static_cast<float>(n() * (n() - 1) / 2);
  for (int r = 0; r < n(); ++r) {
    const auto& [h, b, i, v] = results[r];
    EXPECT_EQ(static_cast<float>(h.item<Half>()), ids);
    EXPECT_EQ(static_cast<float>(b.item<BFloat16>()), ids);
    EXPECT_EQ(i, (static_cast<std::int64_t>(n()) * (n() - 1) / 2) << 40);
    EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{ids / n(), 2 * ids / n()}));
  }
}

TEST_P(SmallAllReduce, APeerLateEnoughForTheOthersToSleep) {
  Watchdog watchdog(kHangLimit, "SmallAllReduce.APeerLateEnoughForTheOthersToSleep");
  MirroredStrategy strategy(cpu_devices(n()));
  for (int late = 0; late < n(); ++late) {
    auto sums = strategy.run([late] {
      ReplicaContext& ctx = *get_replica_context();
      if (ctx.replica_id_in_sync_group() == late) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return ctx.all_reduce(ReduceOp::kSum, 1);
    });
    for (int r = 0; r < n(); ++r) EXPECT_EQ(sums[r], n()) << "late replica " << late;
  }
}

// Every run numbers its collectives from 1 again, so a replica that is late must never have its
// line of an earlier run taken for this run's (its value there differs): after runs that succeeded
// and after runs that failed with lines posted.
TEST_P(SmallAllReduce, LinesOfEarlierRunsNeverCount) {
  Watchdog watchdog(kHangLimit, "SmallAllReduce.LinesOfEarlierRunsNeverCount");
  MirroredStrategy strategy(cpu_devices(n()));
  for (int run = 1; run <= 3 * n(); ++run) {
    const int late = run % n();
    if (run % 3 == 0) {
      expect_error<OutOfRangeError>(
          [&] {
            strategy.run([&] {
              ReplicaContext& ctx = *get_replica_context();
              const int r = ctx.replica_id_in_sync_group();
              (void)ctx.all_reduce(ReduceOp::kSum, std::int64_t{1000} + r);
              if (r == late) throw OutOfRangeError("replica gives up after collective #1");
              (void)ctx.all_reduce(ReduceOp::kSum, std::int64_t{2000} + r);
            });
          },
          {"gives up"});
    }
    auto sums = strategy.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      const int r = ctx.replica_id_in_sync_group();
      if (r == late) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const std::int64_t first = ctx.all_reduce(ReduceOp::kSum, std::int64_t{run} + r);
      const std::int64_t second = ctx.all_reduce(ReduceOp::kSum, std::int64_t{10 * run} + r);
      return first + second;
    });
    for (int r = 0; r < n(); ++r) EXPECT_EQ(sums[r], sum_of(run) + sum_of(10 * run)) << "run " << run << ", replica " << r;
  }
}

TEST_P(SmallAllReduce, ValuesPastTheLimitTakeTheRendezvous) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto sums = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const double r = ctx.replica_id_in_sync_group();
    // 56 bytes.
    return ctx.all_reduce(ReduceOp::kSum, Tensor::from_vector<double>({r, r, r, r, r, r, r + 1}));
  });
  const auto ids = static_cast<double>(n() * (n() - 1) / 2);
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(sums[r].to_vector<double>(), (std::vector<double>{ids, ids, ids, ids, ids, ids, ids + n()}));
  }
}

TEST_P(SmallAllReduce, ADifferenceIsNamedAsOnTheRendezvous) {
  Watchdog watchdog(kHangLimit, "SmallAllReduce.ADifferenceIsNamedAsOnTheRendezvous");
  MirroredStrategy strategy(cpu_devices(n()));
  const int last = n() - 1;
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([last] {
          ReplicaContext& ctx = *get_replica_context();
          const bool odd = ctx.replica_id_in_sync_group() == last;
          (void)ctx.all_reduce(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{odd ? 2 : 1}));
        });
      },
      {"all_reduce #1: replica " + std::to_string(last) + " passed float32[2]", "passed float32[1]"});
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([last] {
          ReplicaContext& ctx = *get_replica_context();
          if (ctx.replica_id_in_sync_group() == last) {
            ctx.merge_call([](Strategy&) {});
          } else {
            (void)ctx.all_reduce(ReduceOp::kSum, 1.0f);
          }
        });
      },
      {"replica " + std::to_string(last) + " called merge_call where", "called all_reduce (collective #1)"});
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([last] {
          ReplicaContext& ctx = *get_replica_context();
          if (ctx.replica_id_in_sync_group() != last) (void)ctx.all_reduce(ReduceOp::kSum, 1.0f);
        });
      },
      {"replica " + std::to_string(last) + " returned from the replica function while"});
  // Usable afterwards, on the small path again.
  auto sums = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 2); });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(sums[r], 2 * n());
}

TEST_P(SmallAllReduce, AFailingPeerReleasesTheWaiters) {
  Watchdog watchdog(kHangLimit, "SmallAllReduce.AFailingPeerReleasesTheWaiters");
  MirroredStrategy strategy(cpu_devices(n()));
  const int last = n() - 1;
  std::vector<std::string> seen(static_cast<std::size_t>(n()));
  expect_error<OutOfRangeError>(
      [&] {
        strategy.run([&] {
          ReplicaContext& ctx = *get_replica_context();
          const int r = ctx.replica_id_in_sync_group();
          if (r == last) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the others sleep by now
            throw OutOfRangeError("the last replica gives up");
          }
          try {
            (void)ctx.all_reduce(ReduceOp::kSum, 1.0f);
          } catch (const AbortedError& e) {
            seen[static_cast<std::size_t>(r)] = e.what();
            throw;
          }
        });
      },
      {"the last replica gives up"});
  for (int r = 0; r < last; ++r) {
    EXPECT_NE(seen[static_cast<std::size_t>(r)].find("replica " + std::to_string(last) + " raised"), std::string::npos)
        << seen[static_cast<std::size_t>(r)];
  }
}

}  // namespace
}  // namespace distribute
