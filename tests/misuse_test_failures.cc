// Never hang (issue 4), continued from misuse_test.cc: a replica that returns early, skips a
// merge_call, raises, or is stuck past a timeout ends the run promptly with a typed error naming the
// replicas involved, and the strategy then runs a correct step; misuse leaves no state behind.
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distribute/distribute.h"
#include "misuse_test.h"
#include "testing/error_expect.h"
#include "testing/semantics_util.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;
using testing::expect_healthy;
using testing::Misuse;
using testing::MisuseAcrossReplicas;
using testing::MyError;
using testing::NotStd;
using testing::replica_id;
using testing::replicas_except;
using testing::replicas_text;
using testing::zeros;

// Long enough that the replicas that are not stuck always arrive in time, even on a loaded machine,
// so the messages name exactly the stuck ones.
constexpr std::chrono::milliseconds kShortTimeout{100};
constexpr std::chrono::milliseconds kStuck{500};

// Records what each replica caught from a collective, then rethrows it; read after run.
class Caught {
 public:
  explicit Caught(int n) : errors_(static_cast<std::size_t>(n)) {}
  template <class Fn>
  void record(Fn&& fn) {
    try {
      fn();
    } catch (...) {
      errors_[static_cast<std::size_t>(replica_id())] = std::current_exception();
      throw;
    }
  }
  const std::exception_ptr& operator[](int replica) const { return errors_[static_cast<std::size_t>(replica)]; }

 private:
  std::vector<std::exception_ptr> errors_;
};


// ---------------------------------------------------------------------------------------------
// A replica that leaves while the others wait.

TEST_P(MisuseAcrossReplicas, ReplicaReturnsWhileOthersWaitInAllReduce) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  Caught caught(n());
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([&] {
          if (replica_id() == 1) return;
          caught.record([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
        });
      },
      {"replica 1 returned from the replica function while " + replicas_text(replicas_except(n(), {1})),
       "in all_reduce (collective #1)"});
  // The waiting replicas were released with the same error.
  for (int r : replicas_except(n(), {1})) {
    expect_error<FailedPreconditionError>([&] { std::rethrow_exception(caught[r]); },
                                          {"replica 1 returned from the replica function"});
  }
  expect_healthy(strategy);
}

// The classic hang: one replica runs out of data a step early.
TEST_P(MisuseAcrossReplicas, ReplicaRunsOutOfDataOneStepEarly) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([odd] {
          const int steps = replica_id() == odd ? 2 : 3;
          for (int step = 0; step < steps; ++step) {
            get_replica_context()->all_reduce(ReduceOp::kMean, zeros(Shape{8}));
          }
        });
      },
      {"replica " + std::to_string(odd) + " returned from the replica function while " + all_but_last(),
       "in all_reduce (collective #3)"});
  expect_healthy(strategy);
}

TEST_F(Misuse, SeveralReplicasReturnWhileOthersWaitInAllGather) {
  MirroredStrategy strategy(cpu_devices(4));
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([] {
          get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
          if (replica_id() % 2 == 1) return;
          get_replica_context()->all_gather(zeros(Shape{1}), 0);
        });
      },
      {"replicas 1, 3 returned from the replica function while replicas 0, 2", "in all_gather (collective #2)"});
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, ReplicaSkipsMergeCall) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  bool merge_fn_ran = false;
  // Skipping it and returning.
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([&] {
          if (replica_id() == odd) return;
          get_replica_context()->merge_call([&](Strategy&) { merge_fn_ran = true; });
        });
      },
      {"replica " + std::to_string(odd) + " returned from the replica function while " + all_but_last(),
       "in merge_call (collective #1)"});
  EXPECT_FALSE(merge_fn_ran);
  expect_healthy(strategy);
  // Skipping it and going on to the next collective.
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([&] {
          if (replica_id() != odd) get_replica_context()->merge_call([&](Strategy&) { merge_fn_ran = true; });
          get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
        });
      },
      {"replica " + std::to_string(odd) + " called all_reduce where " + all_but_last() +
       " called merge_call (collective #1)"});
  EXPECT_FALSE(merge_fn_ran);
  expect_healthy(strategy);
}

// ---------------------------------------------------------------------------------------------
// A replica (or merge_fn) that raises: run rethrows the original, the others are released.

TEST_P(MisuseAcrossReplicas, ReplicaRaisesWhileOthersWaitInAllReduce) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  Caught caught(n());
  std::optional<int> thrower;
  try {
    strategy.run([&] {
      if (replica_id() == 1) throw MyError(1, "bad batch");
      caught.record([] { get_replica_context()->all_reduce(ReduceOp::kSum, zeros(Shape{16})); });
    });
  } catch (const MyError& e) {
    thrower = e.replica;
    EXPECT_STREQ(e.what(), "bad batch");
  }
  EXPECT_EQ(thrower, 1) << "run must rethrow the replica's own MyError";
  for (int r : replicas_except(n(), {1})) {
    expect_error<AbortedError>(
        [&] { std::rethrow_exception(caught[r]); },
        {"replica 1 raised: bad batch", "the other replicas were released from their collectives"});
  }
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, ReplicaRaisesWhileOthersWaitInMergeCall) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  Caught caught(n());
  bool merge_fn_ran = false;
  std::optional<int> thrower;
  try {
    strategy.run([&] {
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
      if (replica_id() == odd) throw MyError(odd, "diverged");
      caught.record([&] { get_replica_context()->merge_call([&](Strategy&) { merge_fn_ran = true; }); });
    });
  } catch (const MyError& e) {
    thrower = e.replica;
  }
  EXPECT_EQ(thrower, odd);
  EXPECT_FALSE(merge_fn_ran);
  for (int r : replicas_except(n(), {odd})) {
    expect_error<AbortedError>([&] { std::rethrow_exception(caught[r]); },
                               {"replica " + std::to_string(odd) + " raised: diverged"});
  }
  expect_healthy(strategy);
}

TEST_F(Misuse, ReplicaRaisesSomethingThatIsNotAStdException) {
  MirroredStrategy strategy(cpu_devices(3));
  Caught caught(3);
  std::optional<int> code;
  try {
    strategy.run([&] {
      if (replica_id() == 0) throw NotStd{42};
      caught.record([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    });
  } catch (const NotStd& e) {
    code = e.code;
  }
  EXPECT_EQ(code, 42);
  for (int r : {1, 2}) {
    expect_error<AbortedError>([&] { std::rethrow_exception(caught[r]); },
                               {"replica 0 raised: an exception not derived from std::exception"});
  }
  expect_healthy(strategy);
}

TEST_F(Misuse, SeveralReplicasRaise) {
  MirroredStrategy strategy(cpu_devices(4));
  std::optional<int> thrower;
  try {
    strategy.run([] {
      const int id = replica_id();
      if (id == 0 || id == 2) throw MyError(id, "replica failed");
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
    });
  } catch (const MyError& e) {
    thrower = e.replica;
  }
  ASSERT_TRUE(thrower.has_value()) << "run must rethrow one of the replicas' MyErrors";
  EXPECT_TRUE(*thrower == 0 || *thrower == 2) << *thrower;
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, MergeFnRaises) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  Caught caught(n());
  std::optional<int> thrower;
  try {
    strategy.run([&] {
      caught.record([] { get_replica_context()->merge_call([](Strategy&) { throw MyError(-1, "merge failed"); }); });
    });
  } catch (const MyError& e) {
    thrower = e.replica;
  }
  EXPECT_EQ(thrower, -1) << "run must rethrow merge_fn's own MyError";
  for (int r = 0; r < n(); ++r) {
    expect_error<AbortedError>([&] { std::rethrow_exception(caught[r]); },
                               {"merge_fn of merge_call #1 raised: merge failed"});
  }
  expect_healthy(strategy);
}

// ---------------------------------------------------------------------------------------------
// Timeouts: a replica stuck in user code.

TEST_P(MisuseAcrossReplicas, CollectiveTimeoutNamesTheStuckReplica) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  expect_error<DeadlineExceededError>(
      [&] {
        strategy.run([] {
          if (replica_id() == 1) std::this_thread::sleep_for(kStuck);
          CommunicationOptions options;
          options.timeout = kShortTimeout;
          get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, options);
        });
      },
      {"timed out after 0.1 s: replica 1 did not arrive while replica ", " waits in all_reduce #1",
       "raise CommunicationOptions::timeout if it is slow"});
  expect_healthy(strategy);
}

TEST_F(Misuse, CollectiveTimeoutNamesEveryStuckReplica) {
  MirroredStrategy strategy(cpu_devices(4));
  expect_error<DeadlineExceededError>(
      [&] {
        strategy.run([] {
          if (replica_id() % 2 == 1) std::this_thread::sleep_for(kStuck);
          CommunicationOptions options;
          options.timeout = kShortTimeout;
          get_replica_context()->all_gather(zeros(Shape{1}), 0, options);
        });
      },
      {"replicas 1, 3 did not arrive while replica ", " waits in all_gather #1"});
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, StrategyWideTimeout) {
  MirroredStrategyOptions timed = options();
  timed.communication.timeout = kShortTimeout;
  MirroredStrategy strategy(cpu_devices(n()), timed);
  const int odd = last();
  expect_error<DeadlineExceededError>(
      [&] {
        strategy.run([odd] {
          get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
          if (replica_id() == odd) std::this_thread::sleep_for(kStuck);
          get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
        });
      },
      {"timed out after 0.1 s: replica " + std::to_string(odd) + " did not arrive while replica ",
       " waits in all_reduce #2"});
  expect_healthy(strategy);
  expect_error<DeadlineExceededError>(
      [&] {
        strategy.run([odd] {
          if (replica_id() == odd) std::this_thread::sleep_for(kStuck);
          get_replica_context()->merge_call([](Strategy&) {});
        });
      },
      {"replica " + std::to_string(odd) + " did not arrive while replica ", " waits in merge_call #1"});
  expect_healthy(strategy);
}

// A call's own timeout replaces the strategy's default.
TEST_F(Misuse, CallTimeoutOverridesStrategyTimeout) {
  MirroredStrategy strategy(cpu_devices(2), MirroredStrategyOptions{.communication = {.timeout = kShortTimeout}});
  auto sums = strategy.run([] {
    if (replica_id() == 1) std::this_thread::sleep_for(kStuck);
    CommunicationOptions options;
    options.timeout = std::chrono::seconds(5);
    return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, options);
  });
  EXPECT_EQ(sums.values(), (std::vector<float>{2.0f, 2.0f}));
}

// A negative timeout used to mean "no timeout" and a NaN one failed every collective later; both
// are refused where they are given: to a strategy, or to one call.
TEST_F(Misuse, TimeoutsThatAreNegativeOrNotFiniteAreRejectedWhereGiven) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::string rule = "it must be a finite number of seconds >= 0";
  for (const double seconds : {-1.0, nan, inf}) {
    SCOPED_TRACE(seconds);
    const std::chrono::duration<double> timeout(seconds);
    expect_error<InvalidArgumentError>(
        [&] {
          MirroredStrategy strategy(cpu_devices(2), MirroredStrategyOptions{.communication = {.timeout = timeout}});
        },
        {"MirroredStrategy: options.communication.timeout is " + absl::StrCat(seconds) + " s", rule,
         "(0: no timeout)"});
    expect_error<InvalidArgumentError>([&] { OneDeviceStrategy strategy("CPU:0", {.timeout = timeout}); },
                                       {"OneDeviceStrategy: options.timeout is", rule});
  }
  MirroredStrategy strategy(cpu_devices(2));
  for (const double seconds : {-0.5, nan}) {
    SCOPED_TRACE(seconds);
    const CommunicationOptions bad{.timeout = std::chrono::duration<double>(seconds)};
    expect_error<InvalidArgumentError>(
        [&] { strategy.run([&] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, bad); }); },
        {"CommunicationOptions::timeout is " + absl::StrCat(seconds) + " s", rule, "(0: the strategy's timeout)"});
    expect_error<InvalidArgumentError>(
        [&] { strategy.run([&] { get_replica_context()->all_gather(zeros(Shape{1}), 0, bad); }); },
        {"CommunicationOptions::timeout is", rule});
    const PerReplica<Tensor> values = strategy.run([] { return zeros(Shape{2}); });
    expect_error<InvalidArgumentError>(
        [&] { (void)strategy.extended().reduce_to(ReduceOp::kSum, values, Device::cpu(), bad); },
        {"CommunicationOptions::timeout is", rule});
    expect_error<InvalidArgumentError>(
        [&] { (void)strategy.extended().gather_to(values, Device::cpu(), 0, bad); },
        {"CommunicationOptions::timeout is", rule});
    expect_healthy(strategy);
    // One replica, where a collective never waits: checked all the same.
    OneDeviceStrategy one("CPU:0");
    expect_error<InvalidArgumentError>(
        [&] { one.run([&] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, bad); }); },
        {"CommunicationOptions::timeout is", rule});
    expect_error<InvalidArgumentError>(
        [&] { one.run([&] { get_replica_context()->all_gather(zeros(Shape{1}), 0, bad); }); },
        {"CommunicationOptions::timeout is", rule});
  }
  // 0 stays "no timeout of its own": the strategy's default, here none.
  const CommunicationOptions zero{.timeout = std::chrono::duration<double>(0)};
  auto sums = strategy.run([&] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, zero); });
  EXPECT_EQ(sums.values(), (std::vector<float>{2.0f, 2.0f}));
  OneDeviceStrategy one("CPU:0", zero);
}

// The timeout bounds waits in collectives, not the others' own work after a replica returned.
TEST_F(Misuse, StrategyTimeoutDoesNotBoundTheReplicasOwnWork) {
  MirroredStrategy strategy(cpu_devices(3), MirroredStrategyOptions{.communication = {.timeout = kShortTimeout}});
  auto ids = strategy.run([] {
    get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
    if (replica_id() == 2) std::this_thread::sleep_for(kStuck);
    return replica_id();
  });
  EXPECT_EQ(ids.values(), (std::vector<int>{0, 1, 2}));
}

// ---------------------------------------------------------------------------------------------
// Misuse leaves no state behind.

TEST_F(Misuse, CollectivesAreCountedPerRun) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_healthy(strategy);  // three collectives in the previous run do not shift the next run's count
  expect_error<InvalidArgumentError>(
      [&] { strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, zeros(Shape{1 + replica_id()})); }); },
      {"all_reduce #1: "});
}

TEST_F(Misuse, RepeatedMisuseLeavesTheStrategyUsable) {
  MirroredStrategy strategy(cpu_devices(3));
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE(round);
    const int odd = round % 3;
    switch (round % 4) {
      case 0:
        expect_error<InvalidArgumentError>(
            [&] {
              strategy.run([odd] {
                get_replica_context()->all_reduce(ReduceOp::kSum, zeros(Shape{replica_id() == odd ? 2 : 3}));
              });
            },
            {"replica " + std::to_string(odd) + " passed float32[2]"});
        break;
      case 1:
        expect_error<FailedPreconditionError>(
            [&] {
              strategy.run([odd] {
                if (replica_id() == odd) return;
                get_replica_context()->all_gather(zeros(Shape{1}), 0);
              });
            },
            {"replica " + std::to_string(odd) + " returned from the replica function"});
        break;
      case 2:
        expect_error<MyError>(
            [&] {
              strategy.run([odd] {
                if (replica_id() == odd) throw MyError(odd, "boom");
                get_replica_context()->merge_call([](Strategy&) {});
              });
            },
            {"boom"});
        break;
      default:
        expect_error<MyError>(
            [&] {
              strategy.run([] { get_replica_context()->merge_call([](Strategy&) { throw MyError(-1, "boom"); }); });
            },
            {"boom"});
        break;
    }
    expect_healthy(strategy);
  }
}

}  // namespace
}  // namespace distribute
