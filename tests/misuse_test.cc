// Never hang (issue 4): replicas that disagree about a collective (shapes, dtypes, structures,
// reduce ops, gather dimensions, options, which collective), a replica that returns early, skips a
// merge_call, raises, or is stuck past a timeout: each ends the run promptly with a typed error whose
// message names the replicas involved, and the same strategy then runs a correct step with right
// results. Every test runs under a watchdog, so a hang aborts instead of blocking ctest. Here the
// replicas that disagree; the ones that leave, raise or are stuck in misuse_test_failures.cc.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "distribute/distribute.h"
#include "misuse_test.h"
#include "testing/error_expect.h"
#include "testing/semantics_util.h"

namespace distribute {
namespace {

using testing::backend_label;
using testing::cpu_devices;
using testing::expect_error;
using testing::expect_healthy;
using testing::Misuse;
using testing::MisuseAcrossReplicas;
using testing::replica_id;
using testing::zeros;

INSTANTIATE_TEST_SUITE_P(
    Replicas, MisuseAcrossReplicas,
    ::testing::Combine(::testing::Values(2, 3, 4),
                       ::testing::Values(CrossDeviceOps::kAuto, CrossDeviceOps::kReductionToOneDevice)),
    [](const auto& p) {
      return std::to_string(std::get<0>(p.param)) + "replicas" + backend_label(std::get<1>(p.param));
    });

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

}  // namespace
}  // namespace distribute
