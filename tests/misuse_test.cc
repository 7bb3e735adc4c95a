// Never hang (issue 4): replicas that disagree about a collective (shapes, dtypes, structures,
// reduce ops, gather dimensions, options, which collective), a replica that returns early, skips a
// merge_call, raises, or is stuck past a timeout: each ends the run promptly with a typed error whose
// message names the replicas involved, and the same strategy then runs a correct step with right
// results. Every test runs under a watchdog, so a hang aborts instead of blocking ctest.
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;
using testing::replicas_except;
using testing::replicas_text;
using testing::Watchdog;

constexpr std::chrono::milliseconds kHangLimit{10000};
// Long enough that the replicas that are not stuck always arrive in time, even on a loaded machine,
// so the messages name exactly the stuck ones.
constexpr std::chrono::milliseconds kShortTimeout{100};
constexpr std::chrono::milliseconds kStuck{500};

// A user exception that is not a distribute::Error, carrying which replica threw it.
struct MyError : std::runtime_error {
  MyError(int replica_id, const std::string& what) : std::runtime_error(what), replica(replica_id) {}
  int replica;
};

// Not even a std::exception.
struct NotStd {
  int code;
};

std::string test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

// Every test of these fixtures runs under a watchdog for its whole lifetime.
template <class Base>
class Guarded : public Base {
 private:
  Watchdog watchdog_{kHangLimit, test_name()};
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

INSTANTIATE_TEST_SUITE_P(
    Replicas, MisuseAcrossReplicas,
    ::testing::Combine(::testing::Values(2, 3, 4),
                       ::testing::Values(CrossDeviceOps::kAuto, CrossDeviceOps::kReductionToOneDevice)),
    [](const auto& p) {
      return std::to_string(std::get<0>(p.param)) + "replicas" +
             (std::get<1>(p.param) == CrossDeviceOps::kAuto ? "SharedMemory" : "ReductionToOneDevice");
    });

int replica_id() { return get_replica_context()->replica_id_in_sync_group(); }

Tensor zeros(Shape shape, DType dtype = DType::kFloat32) { return Tensor::zeros(dtype, std::move(shape)); }

// One correct step with every kind of collective; checks every replica's results exactly.
void expect_healthy(Strategy& strategy) {
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
// Replicas passing different values to one collective: InvalidArgumentError naming them.

TEST_P(MisuseAcrossReplicas, AllReduceShapeMismatch) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([odd] {
          ReplicaContext& ctx = *get_replica_context();
          ctx.all_reduce(ReduceOp::kSum, zeros(Shape{4}));  // a matching one first: the mismatch is #2
          ctx.all_reduce(ReduceOp::kSum, zeros(Shape{replica_id() == odd ? 10 : 12}));
        });
      },
      {"all_reduce #2: replica " + std::to_string(odd) + " passed float32[10], " + all_but_last() +
           " passed float32[12]",
       "all_reduce needs the same dtype and shape on every replica"});
  expect_healthy(strategy);
}

TEST_F(Misuse, AllReduceShapeMismatchGroupsReplicas) {
  MirroredStrategy strategy(cpu_devices(4));
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, zeros(Shape{10 + replica_id() % 2})); });
      },
      {"all_reduce #1: replicas 1, 3 passed float32[11], replicas 0, 2 passed float32[10]"});
  expect_healthy(strategy);
  // Three groups: the largest is the reference, the others are listed in order of first replica.
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, zeros(Shape{10 + replica_id() % 3})); });
      },
      {"all_reduce #1: replica 1 passed float32[11], replica 2 passed float32[12], replicas 0, 3 passed float32[10]"});
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, AllReduceDTypeMismatch) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([odd] {
          get_replica_context()->all_reduce(ReduceOp::kSum,
                                            zeros(Shape{4}, replica_id() == odd ? DType::kFloat64 : DType::kFloat32));
        });
      },
      {"all_reduce #1: replica " + std::to_string(odd) + " passed float64[4], " + all_but_last() +
       " passed float32[4]"});
  expect_healthy(strategy);
}

TEST_F(Misuse, DTypeMismatchInsideNestNamesTheLeaf) {
  MirroredStrategy strategy(cpu_devices(3));
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] {
          std::vector<Tensor> grads{zeros(Shape{2}),
                                    zeros(Shape{3}, replica_id() == 0 ? DType::kInt32 : DType::kFloat32)};
          get_replica_context()->all_reduce(ReduceOp::kSum, grads);
        });
      },
      {"all_reduce #1 (leaf 1): replica 0 passed int32[3], replicas 1, 2 passed float32[3]"});
  expect_healthy(strategy);
}

// Same element count, other shape: a transposed tensor is a mismatch, not a reinterpretation.
TEST_F(Misuse, AllReduceOfATransposedShapeIsAMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run(
            [] { get_replica_context()->all_reduce(ReduceOp::kSum, zeros(replica_id() == 1 ? Shape{3, 2} : Shape{2, 3})); });
      },
      {"all_reduce #1: replica 1 passed float32[3,2], replica 0 passed float32[2,3]"});
  expect_healthy(strategy);
}

// The leaves' dimensions read end to end are the same (2, 0, 0, 4 with a zero-size dimension on
// each side of the cut) on both replicas; where one leaf ends differs, and the first leaf is named.
TEST_F(Misuse, LeavesThatSplitTheSameDimensionsDifferentlyAreAMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] {
          std::vector<Tensor> grads = replica_id() == 1 ? std::vector<Tensor>{zeros(Shape{2}), zeros(Shape{0, 4})}
                                                        : std::vector<Tensor>{zeros(Shape{2, 0}), zeros(Shape{4})};
          get_replica_context()->all_reduce(ReduceOp::kSum, grads);
        });
      },
      {"all_reduce #1 (leaf 0): replica 1 passed float32[2], replica 0 passed float32[2,0]"});
  expect_healthy(strategy);
}

// The same leaves in another order: each leaf is hashed with its position in the digest, so
// swapping two is a mismatch, and the first leaf that differs is named.
TEST_F(Misuse, SwappedLeavesAreAMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] {
          std::vector<Tensor> grads = replica_id() == 1 ? std::vector<Tensor>{zeros(Shape{4}), zeros(Shape{2, 3})}
                                                        : std::vector<Tensor>{zeros(Shape{2, 3}), zeros(Shape{4})};
          get_replica_context()->all_reduce(ReduceOp::kSum, grads);
        });
      },
      {"all_reduce #1 (leaf 0): replica 1 passed float32[4], replica 0 passed float32[2,3]"});
  expect_healthy(strategy);
}

// One leaf deep in a gradient list differs by one element, in each of the digest's lanes, and
// two leaves in different lanes trade their sizes: every case is found and the leaf named.
TEST_F(Misuse, AMismatchDeepInAGradientListIsFound) {
  MirroredStrategy strategy(cpu_devices(2));
  constexpr int kLeaves = 100;
  for (int odd_leaf : {56, 57, 58, 99}) {
    SCOPED_TRACE(odd_leaf);
    expect_error<InvalidArgumentError>(
        [&] {
          strategy.run([odd_leaf] {
            std::vector<Tensor> grads;
            for (int k = 0; k < kLeaves; ++k) {
              grads.push_back(zeros(Shape{k == odd_leaf && replica_id() == 1 ? 9 : 8}));
            }
            get_replica_context()->all_reduce(ReduceOp::kSum, grads);
          });
        },
        {"all_reduce #1 (leaf " + std::to_string(odd_leaf) + "): replica 1 passed float32[9], replica 0 passed float32[8]"});
  }
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] {
          std::vector<Tensor> grads;
          for (int k = 0; k < kLeaves; ++k) {
            const bool traded = replica_id() == 1 && (k == 10 || k == 11);
            grads.push_back(zeros(Shape{traded ? (k == 10 ? 3 : 2) : (k == 10 ? 2 : 3)}));
          }
          get_replica_context()->all_reduce(ReduceOp::kSum, grads);
        });
      },
      {"all_reduce #1 (leaf 10): replica 1 passed float32[3], replica 0 passed float32[2]"});
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, NestStructureMismatch) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  // One more key on the odd replica.
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([odd] {
          std::map<std::string, Tensor> grads{{"w", zeros(Shape{2})}};
          if (replica_id() == odd) grads.emplace("b", zeros(Shape{2}));
          get_replica_context()->all_reduce(ReduceOp::kSum, grads);
        });
      },
      {"all_reduce #1: replica " + std::to_string(odd) + " passed dict{b: Tensor, w: Tensor}, " + all_but_last() +
           " passed dict{w: Tensor}",
       "the nest structure must be the same on every replica"});
  expect_healthy(strategy);
  // Another key, same size.
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([odd] {
          std::map<std::string, Tensor> grads{{replica_id() == odd ? "v" : "w", zeros(Shape{2})}};
          get_replica_context()->all_reduce(ReduceOp::kSum, grads);
        });
      },
      {"replica " + std::to_string(odd) + " passed dict{v: Tensor}, " + all_but_last() + " passed dict{w: Tensor}"});
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, ReduceOpMismatch) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  expect_error<InvalidArgumentError>(
      [&] { strategy.run([odd] { get_replica_context()->all_reduce(replica_id() == odd ? "mean" : "sum", 1.0); }); },
      {"all_reduce #1: replica " + std::to_string(odd) + " passed reduce op MEAN, " + all_but_last() +
       " passed reduce op SUM"});
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, AllGatherShapeMismatchOutsideAxis) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  // Sizes along axis 1 differ on every replica, which is allowed; dimension 0 differs on one.
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([odd] {
          const int id = replica_id();
          get_replica_context()->all_gather(zeros(Shape{id == odd ? 3 : 2, id + 1}), 1);
        });
      },
      {"all_gather #1: replica " + std::to_string(odd) + " passed float32[3," + std::to_string(odd + 1) + "], " +
           all_but_last() + " passed float32[2,1]",
       "all_gather needs the same dtype, rank and dimensions except axis 1"});
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, AllGatherAxisMismatch) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([odd] { get_replica_context()->all_gather(zeros(Shape{2, 2}), replica_id() == odd ? 1 : 0); });
      },
      {"all_gather #1: replica " + std::to_string(odd) + " passed axis=1, " + all_but_last() + " passed axis=0"});
  expect_healthy(strategy);
}

// -1 and 1 name the same axis of a rank-2 value: not a mismatch.
TEST_F(Misuse, AllGatherAxisSpelledNegativelyIsTheSameAxis) {
  MirroredStrategy strategy(cpu_devices(2));
  auto gathered = strategy.run([] {
    const int id = replica_id();
    return get_replica_context()->all_gather(Tensor::from_vector<float>({1, 2}, Shape{1, 2}), id == 0 ? -1 : 1);
  });
  for (const Tensor& t : gathered.values()) {
    EXPECT_EQ(t.shape(), (Shape{1, 4}));
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 1, 2}));
  }
}

TEST_P(MisuseAcrossReplicas, CommunicationOptionsMismatch) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([odd] {
          CommunicationOptions options;
          if (replica_id() == odd) options.bytes_per_pack = 1024;
          get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, options);
        });
      },
      {"all_reduce #1: replica " + std::to_string(odd) +
       " passed options {implementation=AUTO, bytes_per_pack=1024}, " + all_but_last() +
       " passed options {implementation=AUTO, bytes_per_pack=0}"});
  expect_healthy(strategy);
}

// ---------------------------------------------------------------------------------------------
// Replicas making different calls: FailedPreconditionError naming them and the collective.

TEST_P(MisuseAcrossReplicas, AllGatherWhereOthersAllReduce) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([odd] {
          ReplicaContext& ctx = *get_replica_context();
          ctx.all_reduce(ReduceOp::kSum, 1.0f);
          if (replica_id() == odd) {
            ctx.all_gather(zeros(Shape{2}), 0);
          } else {
            ctx.all_reduce(ReduceOp::kSum, zeros(Shape{2}));
          }
        });
      },
      {"replica " + std::to_string(odd) + " called all_gather where " + all_but_last() +
           " called all_reduce (collective #2)",
       "Every replica must make the same collective calls in the same order"});
  expect_healthy(strategy);
}

TEST_F(Misuse, DifferentCollectivesGroupReplicas) {
  MirroredStrategy strategy(cpu_devices(4));
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([] {
          ReplicaContext& ctx = *get_replica_context();
          if (replica_id() % 2 == 1) {
            ctx.all_gather(zeros(Shape{2}), 0);
          } else {
            ctx.all_reduce(ReduceOp::kSum, zeros(Shape{2}));
          }
        });
      },
      {"replicas 1, 3 called all_gather where replicas 0, 2 called all_reduce (collective #1)"});
  expect_healthy(strategy);
}

TEST_F(Misuse, MergeCallWhereOthersAllReduce) {
  MirroredStrategy strategy(cpu_devices(3));
  bool merge_fn_ran = false;
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([&] {
          if (replica_id() == 0) {
            get_replica_context()->merge_call([&](Strategy&) { merge_fn_ran = true; });
          } else {
            get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
          }
        });
      },
      {"replica 0 called merge_call where replicas 1, 2 called all_reduce (collective #1)"});
  EXPECT_FALSE(merge_fn_ran);
  expect_healthy(strategy);
}

TEST_P(MisuseAcrossReplicas, MergeCallWithArgumentsOfOtherTypes) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const int odd = last();
  const auto merge_fn = [](Strategy&, const auto&) {};
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([&] {
          if (replica_id() == odd) {
            get_replica_context()->merge_call(merge_fn, 1.0f);
          } else {
            get_replica_context()->merge_call(merge_fn, 1);
          }
        });
      },
      {"merge_call #1: replica " + std::to_string(odd) + " passed a merge_fn or arguments of other types than " +
           all_but_last(),
       "every replica must call merge_call with the same function"});
  expect_healthy(strategy);
}

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
