// Exceptions from replicas reaching the caller of run: the original exception object, the other
// replicas released from the collective or merge_call they wait in, the strategy usable after.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "context_test.h"
#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_default_context;
using testing::MyError;
using testing::NotStd;
using testing::Watchdog;

constexpr std::chrono::milliseconds kHangLimit{20000};

class RunErrors : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Replicas, RunErrors, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "replicas"; });

// The failing replica throws before the collective; the others are already waiting in it (or
// arrive later) and must be released with an AbortedError naming the failing replica.
TEST_P(RunErrors, ReplicaExceptionReachesCallerAndReleasesAllReduce) {
  Watchdog watchdog(kHangLimit, "RunErrors.ReplicaExceptionReachesCallerAndReleasesAllReduce");
  MirroredStrategy strategy(cpu_devices(n()));
  const int failing = n() - 1;
  std::vector<std::string> released(static_cast<std::size_t>(n()));
  try {
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      if (r == failing) throw MyError(r, "replica broke");
      try {
        get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::from_vector<float>({1, 2}));
      } catch (const AbortedError& e) {
        released[static_cast<std::size_t>(r)] = e.what();
        throw;
      }
    });
    ADD_FAILURE() << "run did not throw";
  } catch (MyError& e) {
    EXPECT_EQ(e.replica, failing);
    EXPECT_STREQ(e.what(), "replica broke");
  }
  for (int r = 0; r < n(); ++r) {
    if (r == failing) continue;
    EXPECT_NE(released[static_cast<std::size_t>(r)].find("replica " + std::to_string(failing) + " raised"),
              std::string::npos)
        << released[static_cast<std::size_t>(r)];
    EXPECT_NE(released[static_cast<std::size_t>(r)].find("replica broke"), std::string::npos);
  }
}

TEST_P(RunErrors, ReplicaExceptionReleasesMergeCall) {
  Watchdog watchdog(kHangLimit, "RunErrors.ReplicaExceptionReleasesMergeCall");
  MirroredStrategy strategy(cpu_devices(n()));
  std::atomic<int> merges{0};
  std::atomic<int> aborted{0};
  try {
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      if (r == 0) throw MyError(r, "first replica broke");
      try {
        get_replica_context()->merge_call([&](Strategy&, const PerReplica<int>&) { merges.fetch_add(1); }, r);
      } catch (const AbortedError&) {
        aborted.fetch_add(1);
        throw;
      }
    });
    ADD_FAILURE() << "run did not throw";
  } catch (MyError& e) {
    EXPECT_EQ(e.replica, 0);
  }
  EXPECT_EQ(merges.load(), 0);
  EXPECT_EQ(aborted.load(), n() - 1);
}

// A replica that fails after a completed collective, while the others wait in the next one.
TEST_P(RunErrors, ExceptionBetweenCollectivesReleasesTheNextOne) {
  Watchdog watchdog(kHangLimit, "RunErrors.ExceptionBetweenCollectivesReleasesTheNextOne");
  MirroredStrategy strategy(cpu_devices(n()));
  std::vector<double> first(static_cast<std::size_t>(n()));
  try {
    strategy.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      const int r = ctx.replica_id_in_sync_group();
      first[static_cast<std::size_t>(r)] = ctx.all_reduce(ReduceOp::kSum, double(r + 1));
      if (r == 1) throw MyError(r, "late failure");
      ctx.all_gather(Tensor::from_vector<float>({1}), 0);
    });
    ADD_FAILURE() << "run did not throw";
  } catch (MyError& e) {
    EXPECT_EQ(e.replica, 1);
  }
  for (double v : first) EXPECT_EQ(v, n() * (n() + 1) / 2.0);
}

TEST_P(RunErrors, TheExceptionObjectItselfIsRethrown) {
  MirroredStrategy strategy(cpu_devices(n()));
  const void* thrown = nullptr;
  try {
    strategy.run([&] {
      if (get_replica_context()->replica_id_in_sync_group() != 1) return;
      try {
        throw NotStd{77};
      } catch (NotStd& e) {
        thrown = &e;
        throw;
      }
    });
    ADD_FAILURE() << "run did not throw";
  } catch (NotStd& e) {
    EXPECT_EQ(e.code, 77);
    EXPECT_EQ(&e, thrown);
  }
}

TEST_P(RunErrors, WhenEveryReplicaThrowsOneOfTheirExceptionsArrives) {
  Watchdog watchdog(kHangLimit, "RunErrors.WhenEveryReplicaThrowsOneOfTheirExceptionsArrives");
  MirroredStrategy strategy(cpu_devices(n()));
  try {
    strategy.run([] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      throw MyError(r, "replica " + std::to_string(r));
    });
    ADD_FAILURE() << "run did not throw";
  } catch (MyError& e) {
    EXPECT_GE(e.replica, 0);
    EXPECT_LT(e.replica, n());
    EXPECT_EQ(std::string(e.what()), "replica " + std::to_string(e.replica));
  }
}

TEST_P(RunErrors, StrategyIsUsableAfterAFailedRun) {
  Watchdog watchdog(kHangLimit, "RunErrors.StrategyIsUsableAfterAFailedRun");
  MirroredStrategy strategy(cpu_devices(n()));
  for (int round = 0; round < 20; ++round) {
    const int failing = round % n();
    EXPECT_THROW(strategy.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      if (ctx.replica_id_in_sync_group() == failing) throw MyError(failing, "fail");
      ctx.all_reduce(ReduceOp::kSum, 1.0f);
      ctx.merge_call([](Strategy&, const PerReplica<int>&) {}, 0);
    }),
                 MyError);
    PerReplica<std::tuple<float, int, Tensor>> ok = strategy.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      const int r = ctx.replica_id_in_sync_group();
      float sum = ctx.all_reduce(ReduceOp::kSum, float(r));
      int merged = ctx.merge_call(
          [](Strategy&, const PerReplica<int>& v) {
            int total = 0;
            for (int x : v.values()) total += x;
            return total;
          },
          r + round);
      Tensor gathered = ctx.all_gather(Tensor::from_vector<std::int32_t>({r}), 0);
      return std::make_tuple(sum, merged, gathered);
    });
    std::vector<std::int32_t> ids;
    for (int r = 0; r < n(); ++r) ids.push_back(r);
    for (int r = 0; r < n(); ++r) {
      EXPECT_EQ(std::get<0>(ok[r]), n() * (n() - 1) / 2.0f);
      EXPECT_EQ(std::get<1>(ok[r]), n() * (n() - 1) / 2 + n() * round);
      EXPECT_EQ(std::get<2>(ok[r]).to_vector<std::int32_t>(), ids);
    }
  }
}

TEST(RunErrorsOneDevice, ExceptionReachesTheCallerAndStrategyStaysUsable) {
  OneDeviceStrategy strategy("CPU:0");
  EXPECT_THROW(strategy.run([] { throw MyError(0, "one device"); }), MyError);
  expect_default_context();
  PerReplica<int> ok = strategy.run([] { return get_replica_context()->replica_id_in_sync_group() + 5; });
  EXPECT_EQ(ok[0], 5);
}


// Library errors raised by one replica's step carry that replica's id to the caller.
TEST(RunErrorReplica, LibraryErrorsNameTheReplicaThatRaisedThem) {
  MirroredStrategy strategy(testing::cpu_devices(3));
  try {
    strategy.run([] {
      ReplicaContext* ctx = get_replica_context();
      if (ctx->replica_id_in_sync_group() == 2) (void)ctx->all_gather(Tensor::scalar(1.0f), 0);  // rank 0: invalid
      (void)ctx->all_reduce(ReduceOp::kSum, 1.0f);
    });
    ADD_FAILURE() << "run did not throw";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.replica_id(), 2) << e.what();
  }
  // Errors that are not one replica's (a mismatch between replicas) name no single replica.
  try {
    strategy.run([] {
      const int id = get_replica_context()->replica_id_in_sync_group();
      (void)get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{id == 0 ? 2 : 3}));
    });
    ADD_FAILURE() << "run did not throw";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.replica_id(), -1) << e.what();
  }
}

}  // namespace
}  // namespace distribute
