// ReplicaContext::all_reduce_async, reduce_scatter_async and all_gather_async on CPU replicas:
// the results are the blocking calls' (1 to 4 replicas, both in-process backends), several handles
// in flight complete in issue order, a blocking collective after async ones keeps the order, the
// call returns before the other replicas arrive; and the errors: a mismatch, a replica that throws,
// a replica that does not arrive, an unwaited handle that failed, a default-constructed handle.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"
#include "testing/semantics_util.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;

class Async : public ::testing::TestWithParam<std::tuple<int, CrossDeviceOps>> {
 protected:
  int n() const { return std::get<0>(GetParam()); }
  MirroredStrategy strategy() const {
    MirroredStrategyOptions o;
    o.cross_device_ops = std::get<1>(GetParam());
    return MirroredStrategy(cpu_devices(n()), o);
  }
};

INSTANTIATE_TEST_SUITE_P(Replicas, Async,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(CrossDeviceOps::kAuto,
                                                              CrossDeviceOps::kReductionToOneDevice)),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "replicas" +
                                  (std::get<1>(p.param) == CrossDeviceOps::kAuto ? "SharedMemory"
                                                                                 : "ReductionToOneDevice");
                         });

// Replica r's leaves: a gradient list of three tensors, one of a few bytes.
std::vector<Tensor> leaves_of(int r) {
  return {Tensor::from_vector<float>({1.0f + float(r), 2.0f, -3.0f * float(r)}),
          Tensor::from_vector<double>(std::vector<double>(1000, 0.5 * (r + 1)), Shape{10, 100}),
          Tensor::from_vector<float>({float(r)})};
}

TEST_P(Async, EveryResultIsTheBlockingCallsResult) {
  MirroredStrategy s = strategy();
  auto result = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    const std::vector<Tensor> mine = leaves_of(r);
    auto reduced = ctx.all_reduce_async(ReduceOp::kSum, mine);
    auto scattered = ctx.reduce_scatter_async(ReduceOp::kMean, mine);
    auto gathered = ctx.all_gather_async(mine, 0);
    auto scalar = ctx.all_reduce_async(ReduceOp::kSum, 2.5f * float(r));
    std::vector<std::vector<Tensor>> async{reduced.wait(), scattered.wait(), gathered.wait()};
    std::vector<std::vector<Tensor>> blocking{ctx.all_reduce(ReduceOp::kSum, mine),
                                              ctx.reduce_scatter(ReduceOp::kMean, mine), ctx.all_gather(mine, 0)};
    EXPECT_TRUE(reduced.ready());
    return std::make_tuple(async, blocking, scalar.wait());
  });
  for (int r = 0; r < n(); ++r) {
    const auto& [async, blocking, scalar] = result[r];
    for (std::size_t c = 0; c < async.size(); ++c) {
      ASSERT_EQ(async[c].size(), blocking[c].size());
      for (std::size_t k = 0; k < async[c].size(); ++k) {
        EXPECT_EQ(async[c][k].shape(), blocking[c][k].shape()) << "call " << c << " leaf " << k;
        EXPECT_EQ(testing::printed(async[c][k]), testing::printed(blocking[c][k])) << "call " << c << " leaf " << k;
      }
    }
    EXPECT_EQ(scalar, 2.5f * float(n() * (n() - 1) / 2));
  }
}

TEST_P(Async, HandlesInFlightCompleteInIssueOrderWhateverOrderTheyAreWaitedIn) {
  MirroredStrategy s = strategy();
  auto result = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const float r = float(ctx.replica_id_in_sync_group());
    std::vector<CollectiveHandle<Tensor>> handles;
    for (int k = 0; k < 6; ++k) {
      handles.push_back(ctx.all_reduce_async(ReduceOp::kSum, Tensor::from_vector<float>({r + 10.0f * float(k)})));
    }
    // A blocking collective in between waits for the six before it.
    const Tensor between = ctx.all_reduce(ReduceOp::kSum, Tensor::from_vector<float>({100.0f}));
    EXPECT_TRUE(handles.back().ready());
    std::vector<float> sums;
    for (int k = 5; k >= 0; --k) sums.push_back(handles[static_cast<std::size_t>(k)].wait().to_vector<float>()[0]);
    sums.push_back(between.to_vector<float>()[0]);
    return sums;
  });
  const float ids = float(n() * (n() - 1) / 2);
  for (int r = 0; r < n(); ++r) {
    std::vector<float> expected;
    for (int k = 5; k >= 0; --k) expected.push_back(ids + 10.0f * float(k) * float(n()));
    expected.push_back(100.0f * float(n()));
    EXPECT_EQ(result[r], expected);
  }
}

class AsyncMisuse : public ::testing::Test {
 protected:
  MirroredStrategy strategy_{cpu_devices(3)};
};

TEST_F(AsyncMisuse, TheCallReturnsBeforeTheOtherReplicasArrive) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "TheCallReturnsBeforeTheOtherReplicasArrive");
  std::atomic<int> issued{0};
  auto result = strategy_.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    // Replica 2 issues only once the others' calls have returned: a call that waited for it
    // would time out.
    if (r == 2) {
      while (issued.load() < 2) std::this_thread::yield();
    }
    CommunicationOptions options;
    options.timeout = std::chrono::seconds(10);
    auto handle = ctx.all_reduce_async(ReduceOp::kSum, Tensor::from_vector<float>({float(r)}), options);
    issued.fetch_add(1);
    return handle.wait().to_vector<float>()[0];
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(result[r], 3.0f);
}

TEST_F(AsyncMisuse, AMismatchIsThrownByWaitOnEveryReplica) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "AMismatchIsThrownByWaitOnEveryReplica");
  std::vector<std::string> seen(3);
  expect_error<InvalidArgumentError>(
      [&] {
        strategy_.run([&] {
          ReplicaContext& ctx = *get_replica_context();
          const int r = ctx.replica_id_in_sync_group();
          auto handle = ctx.all_reduce_async(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{r == 1 ? 5 : 4}));
          try {
            handle.wait();
          } catch (const Error& e) {
            seen[static_cast<std::size_t>(r)] = e.what();
            throw;
          }
        });
      },
      {"all_reduce #1: replica 1 passed float32[5], replicas 0, 2 passed float32[4]"});
  for (const std::string& s : seen) EXPECT_NE(s.find("float32[5]"), std::string::npos) << s;
  // The strategy runs on.
  auto ok = strategy_.run([] { return get_replica_context()->all_reduce_async(ReduceOp::kSum, 1).wait(); });
  EXPECT_EQ(ok[2], 3);
}

TEST_F(AsyncMisuse, AReplicaThatThrowsReleasesTheOthersHandles) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "AReplicaThatThrowsReleasesTheOthersHandles");
  std::vector<std::string> released(3);
  try {
    strategy_.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      const int r = ctx.replica_id_in_sync_group();
      if (r == 0) throw std::runtime_error("replica broke");
      auto handle = ctx.all_reduce_async(ReduceOp::kSum, Tensor::from_vector<float>({1, 2, 3}));
      try {
        handle.wait();
      } catch (const AbortedError& e) {
        released[static_cast<std::size_t>(r)] = e.what();
        throw;
      }
    });
    ADD_FAILURE() << "run did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "replica broke");
  }
  for (int r = 1; r < 3; ++r) {
    EXPECT_NE(released[static_cast<std::size_t>(r)].find("replica 0 raised: replica broke"), std::string::npos)
        << released[static_cast<std::size_t>(r)];
  }
}

TEST_F(AsyncMisuse, AReplicaThatDoesNotArriveTimesOutInWait) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "AReplicaThatDoesNotArriveTimesOutInWait");
  expect_error<DeadlineExceededError>(
      [&] {
        strategy_.run([] {
          ReplicaContext& ctx = *get_replica_context();
          if (ctx.replica_id_in_sync_group() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
          CommunicationOptions options;
          options.timeout = std::chrono::milliseconds(100);
          ctx.all_reduce_async(ReduceOp::kSum, Tensor::from_vector<float>({1, 2, 3}), options).wait();
        });
      },
      {"did not arrive while replica ", " waits in all_reduce #1"});
}

TEST_F(AsyncMisuse, AnUnwaitedHandleIsWaitedForAtTheReturnAndItsFailureFailsTheRun) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "AnUnwaitedHandleIsWaitedForAtTheReturn");
  // Unwaited and fine: the run waits for it, and the next run starts clean.
  std::atomic<int> done{0};
  strategy_.run([&] {
    get_replica_context()->all_reduce_async(ReduceOp::kSum, Tensor::from_vector<float>({1, 2}));
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), 3);
  // Unwaited and mismatched: the run fails with the mismatch.
  expect_error<InvalidArgumentError>(
      [&] {
        strategy_.run([] {
          ReplicaContext& ctx = *get_replica_context();
          ctx.all_reduce_async(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{ctx.replica_id_in_sync_group() + 1}));
        });
      },
      {"all_reduce #1: ", "passed float32[1]"});
  auto ok = strategy_.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 2); });
  EXPECT_EQ(ok[0], 6);
}

TEST(AsyncHandle, ADefaultConstructedHandleHoldsNothing) {
  CollectiveHandle<Tensor> handle;
  EXPECT_FALSE(handle.valid());
  EXPECT_FALSE(handle.ready());
  expect_error<FailedPreconditionError>([&] { handle.wait(); },
                                        {"CollectiveHandle::wait: the handle holds no collective (default-constructed)"});
}

TEST(AsyncHandle, OutsideAReplicaTheCallIsAFailedPrecondition) {
  MirroredStrategy strategy(cpu_devices(2));
  ReplicaContext* first = nullptr;
  strategy.run([&] {
    if (get_replica_context()->replica_id_in_sync_group() == 0) first = get_replica_context();
  });
  expect_error<FailedPreconditionError>([&] { first->all_reduce_async(ReduceOp::kSum, 1.0f); },
                                        {"ReplicaContext::all_reduce_async of replica 0 called"});
}

}  // namespace
}  // namespace distribute
