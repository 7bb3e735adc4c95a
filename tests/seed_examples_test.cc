// The examples of the reference documents (../shared/seeds), in C++, with their exact values:
// the documented 2-replica results and the same programs with 3 and 4 replicas.
#include <gtest/gtest.h>

#include <sstream>

#include "distribute/distribute.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::cpu_devices;

class SeedExamples : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Replicas, SeedExamples, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "replicas"; });

// ReplicaContext page: func returns replica_id_in_sync_group.
TEST_P(SeedExamples, ReplicaIdPerReplica) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto result = strategy.run([] { return Tensor::scalar<std::int32_t>(get_replica_context()->replica_id_in_sync_group()); });
  ASSERT_EQ(result.num_replicas(), n());
  for (int i = 0; i < n(); ++i) EXPECT_EQ(result[i].item<std::int32_t>(), i);
  if (n() == 2) {
    std::ostringstream os;
    os << result;
    EXPECT_EQ(os.str(),
              "PerReplica:{\n  0: <Tensor: shape=(), dtype=int32, numpy=0>,\n"
              "  1: <Tensor: shape=(), dtype=int32, numpy=1>\n}");
  }
}

// all_gather of a single tensor along axis 0.
TEST_P(SeedExamples, AllGatherSingleTensor) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto result = strategy.run([] {
    return get_replica_context()->all_gather(Tensor::from_vector<std::int32_t>({1, 2, 3}), 0);
  });
  std::vector<std::int32_t> expected;
  for (int i = 0; i < n(); ++i) expected.insert(expected.end(), {1, 2, 3});
  for (const Tensor& t : strategy.experimental_local_results(result)) {
    EXPECT_EQ(t.shape(), Shape{3 * n()});
    EXPECT_EQ(t.to_vector<std::int32_t>(), expected);
  }
  if (n() == 2) {
    std::ostringstream os;
    os << result[0];
    EXPECT_EQ(os.str(), "<Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>");
  }
}

// all_gather of a nest (a list of two tensors).
TEST_P(SeedExamples, AllGatherNest) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto result = strategy.run([] {
    std::vector<Tensor> value{Tensor::from_vector<std::int32_t>({1, 2, 3}),
                              Tensor::from_vector<std::int32_t>({1, 2, 3, 4}, Shape{2, 2})};
    return get_replica_context()->all_gather(value, 0);
  });
  for (const std::vector<Tensor>& local : strategy.experimental_local_results(result)) {
    ASSERT_EQ(local.size(), 2u);
    EXPECT_EQ(local[0].shape(), Shape{3 * n()});
    EXPECT_EQ(local[1].shape(), (Shape{2 * n(), 2}));
    std::vector<std::int32_t> expected;
    for (int i = 0; i < n(); ++i) expected.insert(expected.end(), {1, 2, 3, 4});
    EXPECT_EQ(local[1].to_vector<std::int32_t>(), expected);
  }
}

// all_gather of a dict whose values differ in size along axis 0 between replicas.
TEST_P(SeedExamples, AllGatherUnevenDict) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto result = strategy.run([] {
    const int id = get_replica_context()->replica_id_in_sync_group();
    std::map<std::string, Tensor> value;
    if (id == 0) {
      value["a"] = Tensor::from_vector<std::int32_t>({0});
      value["b"] = Tensor::from_vector<std::int32_t>({0, 1}, Shape{1, 2});
    } else {
      value["a"] = Tensor::from_vector<std::int32_t>({id});
      value["b"] = Tensor::from_vector<std::int32_t>({2 * id, 2 * id + 1, 2 * id + 2, 2 * id + 3}, Shape{2, 2});
    }
    return get_replica_context()->all_gather(value, 0);
  });
  std::vector<std::int32_t> a, b{0, 1};
  for (int i = 0; i < n(); ++i) a.push_back(i);
  for (int i = 1; i < n(); ++i) b.insert(b.end(), {2 * i, 2 * i + 1, 2 * i + 2, 2 * i + 3});
  for (const auto& local : strategy.experimental_local_results(result)) {
    EXPECT_EQ(local.at("a").to_vector<std::int32_t>(), a);
    EXPECT_EQ(local.at("b").shape(), (Shape{2 * n() - 1, 2}));
    EXPECT_EQ(local.at("b").to_vector<std::int32_t>(), b);
  }
  if (n() == 2) {
    EXPECT_EQ(result[0].at("a").to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1}));
    EXPECT_EQ(result[0].at("b").to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  }
}

// all_reduce SUM of 1.0 and of a list [1.0, 2.0].
TEST_P(SeedExamples, AllReduceScalarAndList) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto single = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::scalar(1.0f)); });
  for (const Tensor& t : strategy.experimental_local_results(single)) EXPECT_EQ(t.item<float>(), 1.0f * n());
  auto list = strategy.run([] {
    return get_replica_context()->all_reduce(ReduceOp::kSum, std::vector<Tensor>{Tensor::scalar(1.0f), Tensor::scalar(2.0f)});
  });
  for (const auto& local : strategy.experimental_local_results(list)) {
    EXPECT_EQ(local[0].item<float>(), 1.0f * n());
    EXPECT_EQ(local[1].item<float>(), 2.0f * n());
  }
}

// Strategy.run page: constant input, distributed values input, all_reduce("sum") of replica ids.
TEST_P(SeedExamples, RunExamples) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto doubled = strategy.run([](const Tensor& input) { return Tensor::scalar(input.item<float>() * 2.0f); },
                              Tensor::scalar(3.0f));
  for (const Tensor& t : doubled.values()) EXPECT_EQ(t.item<float>(), 6.0f);

  auto values = strategy.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return ctx.num_replicas_in_sync(); });
  auto twice = strategy.run([](int input) { return input * 2; }, values);
  for (int v : twice.values()) EXPECT_EQ(v, 2 * n());

  auto ids = strategy.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return Tensor::scalar<std::int32_t>(ctx.replica_id_in_sync_group()); });
  auto summed = strategy.run([](const Tensor& input) { return get_replica_context()->all_reduce("sum", input); }, ids);
  for (const Tensor& t : summed.values()) EXPECT_EQ(t.item<std::int32_t>(), n() * (n() - 1) / 2);
}

// Strategy.reduce docstring: SUM of replica ids, and the axis examples.
TEST_P(SeedExamples, ReduceExamples) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto ids = strategy.run([] { return Tensor::scalar<std::int32_t>(get_replica_context()->replica_id_in_sync_group()); });
  Tensor total = strategy.reduce("SUM", ids, std::nullopt);
  EXPECT_EQ(total.item<std::int32_t>(), n() * (n() - 1) / 2);
  EXPECT_EQ(total.device().to_string(), "/job:localhost/replica:0/task:0/device:CPU:0");
  // Collective results live on the replica's device; Strategy::reduce's result on the host.
  auto reduced = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::scalar(1)); });
  EXPECT_EQ(reduced[1].device().to_string(), "/job:localhost/replica:0/task:0/device:CPU:1");

  // Global batch 4n: replica r holds [4r, 4r+1, 4r+2, 4r+3].
  auto batches = strategy.experimental_distribute_values_from_function([](const ValueContext& ctx) {
    const float base = 4.0f * ctx.replica_id_in_sync_group();
    return Tensor::from_vector<float>({base, base + 1, base + 2, base + 3});
  });
  Tensor across = strategy.reduce("sum", batches, std::nullopt);
  std::vector<float> expected(4, 0.0f);
  for (int r = 0; r < n(); ++r)
    for (int k = 0; k < 4; ++k) expected[static_cast<std::size_t>(k)] += 4.0f * r + k;
  EXPECT_EQ(across.to_vector<float>(), expected);  // n=2: [0+4, 1+5, 2+6, 3+7]
  Tensor everything = strategy.reduce("sum", batches, 0);
  const float all = 4.0f * n() * (4.0f * n() - 1) / 2;
  EXPECT_EQ(everything.item<float>(), all);  // n=2: 0+1+...+7 = 28

  // A last partial batch of 6 split [0, 1, 2, 3] and [4, 5] (then [6], [7] ... for more replicas).
  auto partial = strategy.experimental_distribute_values_from_function([](const ValueContext& ctx) {
    if (ctx.replica_id_in_sync_group() == 0) return Tensor::from_vector<float>({0, 1, 2, 3});
    if (ctx.replica_id_in_sync_group() == 1) return Tensor::from_vector<float>({4, 5});
    return Tensor::from_vector<float>({static_cast<float>(4 + ctx.replica_id_in_sync_group())});
  });
  const float count = 6.0f + (n() - 2);
  float sum = 15.0f;
  for (int r = 2; r < n(); ++r) sum += 4.0f + r;
  EXPECT_FLOAT_EQ(strategy.reduce(ReduceOp::kMean, partial, 0).item<float>(), sum / count);  // n=2: 15/6 = 2.5
}

// Strategy.gather docstring: [[1], [2]] on every replica gathered on axis 0; and the 4-replica
// (1, 2, 3) example for axes 0, 1, 2.
TEST_P(SeedExamples, GatherExamples) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto values = strategy.experimental_distribute_values_from_function(
      [](const ValueContext&) { return Tensor::from_vector<std::int32_t>({1, 2}, Shape{2, 1}); });
  Tensor gathered = strategy.gather(values, 0);
  EXPECT_EQ(gathered.shape(), (Shape{2 * n(), 1}));
  std::vector<std::int32_t> expected;
  for (int i = 0; i < n(); ++i) expected.insert(expected.end(), {1, 2});
  EXPECT_EQ(gathered.to_vector<std::int32_t>(), expected);

  auto single = strategy.experimental_distribute_values_from_function(
      [](const ValueContext&) { return Tensor::from_vector<std::int32_t>({0, 1, 2, 3, 4, 5}, Shape{1, 2, 3}); });
  Tensor axis0 = strategy.gather(single, 0);
  EXPECT_EQ(axis0.shape(), (Shape{n(), 2, 3}));
  Tensor axis1 = strategy.gather(single, 1);
  EXPECT_EQ(axis1.shape(), (Shape{1, 2 * n(), 3}));
  Tensor axis2 = strategy.gather(single, 2);
  EXPECT_EQ(axis2.shape(), (Shape{1, 2, 3 * n()}));
  std::vector<std::int32_t> e0, e1, e2;
  for (int i = 0; i < n(); ++i) e0.insert(e0.end(), {0, 1, 2, 3, 4, 5});
  for (int i = 0; i < n(); ++i) e1.insert(e1.end(), {0, 1, 2, 3, 4, 5});
  for (int row = 0; row < 2; ++row)
    for (int i = 0; i < n(); ++i) e2.insert(e2.end(), {3 * row, 3 * row + 1, 3 * row + 2});
  EXPECT_EQ(axis0.to_vector<std::int32_t>(), e0);
  EXPECT_EQ(axis1.to_vector<std::int32_t>(), e1);
  EXPECT_EQ(axis2.to_vector<std::int32_t>(), e2);
  if (n() == 4) {
    EXPECT_EQ(axis2.to_vector<std::int32_t>(),
              (std::vector<std::int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 4, 5}));
  }
}

// DistributedValues page: [5, 6] then [7, 8] batches; run(input + 1); reduce SUM axis 0; local results.
TEST(SeedDistributedValues, DatasetExamples) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  PerReplica<Tensor> batch({Tensor::from_vector<float>({5.0f}), Tensor::from_vector<float>({6.0f})});
  std::ostringstream os;
  os << batch;
  EXPECT_EQ(os.str(),
            "PerReplica:{\n  0: <Tensor: shape=(1,), dtype=float32, numpy=[5.0]>,\n"
            "  1: <Tensor: shape=(1,), dtype=float32, numpy=[6.0]>\n}");
  auto updated = strategy.run([](const Tensor& input) { return Tensor::from_vector<float>({input.item<float>() + 1.0f}); }, batch);
  EXPECT_EQ(updated[0].to_vector<float>(), std::vector<float>{6.0f});
  EXPECT_EQ(updated[1].to_vector<float>(), std::vector<float>{7.0f});
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, batch, 0).item<float>(), 11.0f);
  auto local = strategy.experimental_local_results(batch);
  ASSERT_EQ(local.size(), 2u);
  EXPECT_EQ(local[1].to_vector<float>(), std::vector<float>{6.0f});
}

}  // namespace
}  // namespace distribute
