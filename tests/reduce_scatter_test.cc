// ReplicaContext::reduce_scatter on CPU replicas, through both backends that serve them (shared
// memory and the reduction to one device, whose code GPU replicas run too): the shard rule, SUM
// and MEAN on nests of every shape (empty leaves, leaves shorter than the replica count, uneven
// shards), each shard bit for bit the matching part of the all_reduce of the same values, string
// op names; all_gather_shards_in_place, its way back; and their errors: a scalar leaf, wholes of
// different counts, shapes that differ, a replica that throws, a replica that does not arrive.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
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

TEST(ShardOf, ShardsAreContiguousAndTheFirstOnesLonger) {
  // 10 elements among 4 replicas: 3, 3, 2, 2.
  EXPECT_EQ(shard_of(10, 4, 0).begin, 0);
  EXPECT_EQ(shard_of(10, 4, 0).size, 3);
  EXPECT_EQ(shard_of(10, 4, 1).begin, 3);
  EXPECT_EQ(shard_of(10, 4, 1).size, 3);
  EXPECT_EQ(shard_of(10, 4, 2).begin, 6);
  EXPECT_EQ(shard_of(10, 4, 2).size, 2);
  EXPECT_EQ(shard_of(10, 4, 3).begin, 8);
  EXPECT_EQ(shard_of(10, 4, 3).size, 2);
  // Fewer elements than replicas: the last ones get none.
  EXPECT_EQ(shard_of(2, 4, 1).size, 1);
  EXPECT_EQ(shard_of(2, 4, 2).begin, 2);
  EXPECT_EQ(shard_of(2, 4, 2).size, 0);
  EXPECT_EQ(shard_of(0, 3, 0).size, 0);
  for (std::int64_t count : {0, 1, 5, 12, 13}) {
    for (std::int64_t n : {1, 2, 3, 7}) {
      std::int64_t next = 0;
      for (std::int64_t r = 0; r < n; ++r) {
        const Shard s = shard_of(count, n, r);
        EXPECT_EQ(s.begin, next);
        EXPECT_GE(s.size, count / n);
        EXPECT_LE(s.size, count / n + 1);
        next += s.size;
      }
      EXPECT_EQ(next, count);
    }
  }
}

class ReduceScatter : public ::testing::TestWithParam<std::tuple<int, CrossDeviceOps>> {
 protected:
  int n() const { return std::get<0>(GetParam()); }
  MirroredStrategy strategy() const {
    MirroredStrategyOptions o;
    o.cross_device_ops = std::get<1>(GetParam());
    return MirroredStrategy(cpu_devices(n()), o);
  }
};

INSTANTIATE_TEST_SUITE_P(Replicas, ReduceScatter,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(CrossDeviceOps::kAuto,
                                                              CrossDeviceOps::kReductionToOneDevice)),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "replicas" +
                                  (std::get<1>(p.param) == CrossDeviceOps::kAuto ? "SharedMemory"
                                                                                 : "ReductionToOneDevice");
                         });

// Replica r's value of a leaf of `count` elements: small integers, exact in every dtype, and
// with fractions for MEAN to keep.
std::vector<double> values_of(int r, std::int64_t count) {
  std::vector<double> v(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = double((i * 5 + r * 3) % 13) - 6.5;
  return v;
}

// A float32 or float64 leaf of `v`.
Tensor leaf_of(DType dtype, const std::vector<double>& v, const Shape& shape) {
  if (dtype == DType::kFloat64) return Tensor::from_vector<double>(v, shape);
  return Tensor::from_vector<float>(std::vector<float>(v.begin(), v.end()), shape);
}

std::vector<double> doubles_of(const Tensor& t) {
  if (t.dtype() == DType::kFloat64) return t.to_vector<double>();
  const std::vector<float> v = t.to_vector<float>();
  return {v.begin(), v.end()};
}

// Every replica's reduce_scatter of leaves of `shapes` (float32 and float64 in turn) against its
// all_reduce.
void expect_shards_of_the_all_reduce(MirroredStrategy& s, int n, const std::vector<Shape>& shapes) {
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
    auto result = s.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      const int r = ctx.replica_id_in_sync_group();
      std::vector<Tensor> leaves;
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        const DType dtype = k % 2 == 0 ? DType::kFloat32 : DType::kFloat64;
        leaves.push_back(leaf_of(dtype, values_of(r + static_cast<int>(k), shapes[k].num_elements()), shapes[k]));
      }
      return std::make_pair(ctx.reduce_scatter(op, leaves), ctx.all_reduce(op, leaves));
    });
    for (int r = 0; r < n; ++r) {
      const auto& [shards, whole] = result[r];
      ASSERT_EQ(shards.size(), shapes.size());
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        const Shard shard = shard_of(shapes[k].num_elements(), n, r);
        EXPECT_EQ(shards[k].shape(), Shape{shard.size}) << "leaf " << k << " replica " << r;
        EXPECT_EQ(shards[k].dtype(), whole[k].dtype());
        const std::vector<double> all = doubles_of(whole[k]);
        const std::vector<double> expected(all.begin() + shard.begin, all.begin() + shard.begin + shard.size);
        EXPECT_EQ(doubles_of(shards[k]), expected) << "leaf " << k << " replica " << r;
      }
    }
  }
}

TEST_P(ReduceScatter, EveryShardIsItsPartOfTheAllReduce) {
  MirroredStrategy s = strategy();
  // Leaves of 7 (uneven shards), 2x3, 1 (shorter than the replicas), 0 and 4096 elements.
  expect_shards_of_the_all_reduce(s, n(), {Shape{7}, Shape{2, 3}, Shape{1}, Shape{0}, Shape{64, 64}});
}

// The shared-memory backend moves a few hundred bytes through staging areas, and a few bytes in
// one cache line per replica.
TEST_P(ReduceScatter, EveryShardOfAFewBytesIsItsPartOfTheAllReduce) {
  MirroredStrategy s = strategy();
  expect_shards_of_the_all_reduce(s, n(), {Shape{7}, Shape{2, 3}, Shape{1}, Shape{0}, Shape{9, 5}});
  expect_shards_of_the_all_reduce(s, n(), {Shape{3}, Shape{1}, Shape{0}});
}

TEST_P(ReduceScatter, ExpectedValuesOfSumAndMean) {
  MirroredStrategy s = strategy();
  // Replica r passes [r, r, r, r, r, r, r, r] + [0..7]: the SUM is n * i + n(n-1)/2.
  auto result = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const float r = float(ctx.replica_id_in_sync_group());
    std::vector<float> v;
    std::vector<float> doubled;
    for (int i = 0; i < 8; ++i) {
      v.push_back(r + float(i));
      doubled.push_back(2 * (r + float(i)));
    }
    const Tensor t = Tensor::from_vector<float>(v);
    return std::make_tuple(
        ctx.reduce_scatter(ReduceOp::kSum, t), ctx.reduce_scatter("mean", t),
        ctx.reduce_scatter("SUM", std::map<std::string, Tensor>{{"a", t}, {"b", Tensor::from_vector<float>(doubled)}}));
  });
  const float ids = float(n() * (n() - 1)) / 2;
  for (int r = 0; r < n(); ++r) {
    const auto& [sum, mean, named] = result[r];
    const Shard shard = shard_of(8, n(), r);
    std::vector<float> sums;
    std::vector<float> means;
    for (std::int64_t i = shard.begin; i < shard.begin + shard.size; ++i) {
      sums.push_back(float(n()) * float(i) + ids);
      means.push_back(float(i) + ids / float(n()));
    }
    EXPECT_EQ(sum.to_vector<float>(), sums);
    EXPECT_EQ(mean.to_vector<float>(), means);
    EXPECT_EQ(named.at("a").to_vector<float>(), sums);
    std::vector<float> doubled;
    for (float x : sums) doubled.push_back(2 * x);
    EXPECT_EQ(named.at("b").to_vector<float>(), doubled);
  }
}

TEST_P(ReduceScatter, IntegerMeanTruncatesTowardZero) {
  MirroredStrategy s = strategy();
  // Replica r passes 2^r + 1 in every element, negated in the second half.
  auto result = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const std::int32_t v = (1 << ctx.replica_id_in_sync_group()) + 1;
    return ctx.reduce_scatter(ReduceOp::kMean, Tensor::from_vector<std::int32_t>({v, v, v, -v, -v, -v}));
  });
  std::int32_t sum = 0;
  for (int r = 0; r < n(); ++r) sum += (1 << r) + 1;
  const std::vector<std::int32_t> all = {sum / n(), sum / n(), sum / n(), -sum / n(), -sum / n(), -sum / n()};
  for (int r = 0; r < n(); ++r) {
    const Shard shard = shard_of(6, n(), r);
    EXPECT_EQ(result[r].to_vector<std::int32_t>(),
              std::vector<std::int32_t>(all.begin() + shard.begin, all.begin() + shard.begin + shard.size));
  }
}

TEST_P(ReduceScatter, AScalarLeafIsAnInvalidArgument) {
  MirroredStrategy s = strategy();
  expect_error<InvalidArgumentError>(
      [&] {
        s.run([] {
          get_replica_context()->reduce_scatter(ReduceOp::kSum,
                                                std::make_tuple(Tensor::from_vector<float>({1, 2}), 3.0f));
        });
      },
      {"reduce_scatter: leaf 1 is a scalar, which cannot be cut into shards; pass Tensors"});
  // A rank-0 Tensor is one element, which replica 0 gets.
  auto result = s.run([] { return get_replica_context()->reduce_scatter(ReduceOp::kSum, Tensor::scalar(2.0f)); });
  EXPECT_EQ(result[0].to_vector<float>(), std::vector<float>{2.0f * float(n())});
  for (int r = 1; r < n(); ++r) EXPECT_EQ(result[r].num_elements(), 0);
}

TEST_P(ReduceScatter, AllGatherShardsInPlaceGivesEveryReplicaEveryPart) {
  MirroredStrategy s = strategy();
  // Leaves of 7, 2 and 0 elements: uneven shards, shards of none, an empty leaf.
  const std::vector<Shape> shapes{Shape{7}, Shape{2, 1}, Shape{0}};
  auto result = s.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    std::vector<Tensor> wholes;
    for (const Shape& shape : shapes) {
      // This replica's part holds 10 * (r + 1) + i; the rest holds -1, to be overwritten.
      std::vector<float> v(static_cast<std::size_t>(shape.num_elements()), -1.0f);
      const Shard mine = ctx.shard(shape.num_elements());
      for (std::int64_t i = mine.begin; i < mine.begin + mine.size; ++i) {
        v[static_cast<std::size_t>(i)] = float(10 * (r + 1) + i);
      }
      wholes.push_back(Tensor::from_vector<float>(v, shape));
    }
    ctx.all_gather_shards_in_place(wholes);
    return wholes;
  });
  for (int r = 0; r < n(); ++r) {
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      std::vector<float> expected;
      for (int owner = 0; owner < n(); ++owner) {
        const Shard part = shard_of(shapes[k].num_elements(), n(), owner);
        for (std::int64_t i = part.begin; i < part.begin + part.size; ++i) expected.push_back(float(10 * (owner + 1) + i));
      }
      EXPECT_EQ(result[r][k].shape(), shapes[k]);
      EXPECT_EQ(result[r][k].to_vector<float>(), expected) << "leaf " << k << " replica " << r;
    }
  }
}

class ReduceScatterMisuse : public ::testing::Test {
 protected:
  MirroredStrategy strategy_{cpu_devices(3)};
};

TEST_F(ReduceScatterMisuse, DifferentShapesNameTheReplicas) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "DifferentShapesNameTheReplicas");
  expect_error<InvalidArgumentError>(
      [&] {
        strategy_.run([] {
          const int r = get_replica_context()->replica_id_in_sync_group();
          get_replica_context()->reduce_scatter(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{r == 1 ? 5 : 4}));
        });
      },
      {"reduce_scatter #1: replica 1 passed float32[5], replicas 0, 2 passed float32[4]",
       "reduce_scatter needs the same dtype and shape on every replica"});
  auto ok = strategy_.run([] {
    return get_replica_context()->reduce_scatter(ReduceOp::kSum, Tensor::from_vector<float>({1, 1, 1}));
  });
  EXPECT_EQ(ok[2].to_vector<float>(), std::vector<float>{3});
}

TEST_F(ReduceScatterMisuse, AllGatherShardsInPlaceOfWholesOfDifferentCountsIsNamed) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "AllGatherShardsInPlaceOfWholesOfDifferentCountsIsNamed");
  expect_error<InvalidArgumentError>(
      [&] {
        strategy_.run([] {
          ReplicaContext& ctx = *get_replica_context();
          const Tensor whole = Tensor::zeros(DType::kFloat32, Shape{ctx.replica_id_in_sync_group() == 1 ? 9 : 6});
          ctx.all_gather_shards_in_place(std::span(&whole, 1));
        });
      },
      {"all_gather_shards_in_place: leaf 0: the replicas' shards add up to 7 elements but this replica's whole has ",
       "every replica must pass wholes of the same element counts"});
  auto ok = strategy_.run([] {
    const Tensor whole = Tensor::from_vector<float>({1, 2, 3});
    get_replica_context()->all_gather_shards_in_place(std::span(&whole, 1));
    return whole;
  });
  EXPECT_EQ(ok[1].to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST_F(ReduceScatterMisuse, AnAllReduceWhereTheOthersReduceScatterIsNamed) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "AnAllReduceWhereTheOthersReduceScatterIsNamed");
  expect_error<FailedPreconditionError>(
      [&] {
        strategy_.run([] {
          ReplicaContext& ctx = *get_replica_context();
          const Tensor t = Tensor::from_vector<float>({1, 2, 3});
          if (ctx.replica_id_in_sync_group() == 2) {
            ctx.all_reduce(ReduceOp::kSum, t);
          } else {
            ctx.reduce_scatter(ReduceOp::kSum, t);
          }
        });
      },
      {"replica 2 called all_reduce where replicas 0, 1 called reduce_scatter"});
}

TEST_F(ReduceScatterMisuse, AReplicaThatThrowsReleasesTheOthers) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "AReplicaThatThrowsReleasesTheOthers");
  std::vector<std::string> released(3);
  try {
    strategy_.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      if (r == 0) throw std::runtime_error("replica broke");
      try {
        get_replica_context()->reduce_scatter(ReduceOp::kSum, Tensor::from_vector<float>({1, 2, 3}));
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

TEST_F(ReduceScatterMisuse, AReplicaThatDoesNotArriveTimesOut) {
  testing::Watchdog watchdog(std::chrono::seconds(30), "AReplicaThatDoesNotArriveTimesOut");
  expect_error<DeadlineExceededError>(
      [&] {
        strategy_.run([] {
          ReplicaContext& ctx = *get_replica_context();
          if (ctx.replica_id_in_sync_group() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
          CommunicationOptions options;
          options.timeout = std::chrono::milliseconds(100);
          ctx.reduce_scatter(ReduceOp::kSum, Tensor::from_vector<float>({1, 2, 3}), options);
        });
      },
      {"did not arrive while replica ", " waits in reduce_scatter #1"});
}

}  // namespace
}  // namespace distribute
