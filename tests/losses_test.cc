// nn::compute_average_loss: the sum of the per-example losses over the global batch, by default
// the replica's batch times the replicas (1-4), or the given global batch size; and its errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;

class ComputeAverageLoss : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Replicas, ComputeAverageLoss, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "replicas"; });

TEST_P(ComputeAverageLoss, DividesByTheReplicaBatchTimesTheReplicas) {
  MirroredStrategy strategy(cpu_devices(n()));
  PerReplica<Tensor> losses = strategy.run([] {
    const float r = static_cast<float>(get_replica_context()->replica_id_in_sync_group());
    return nn::compute_average_loss(Tensor::from_vector<float>({1 + r, 2, 3, 4}));
  });
  float total = 0;
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(losses[r].shape(), Shape{});
    EXPECT_EQ(losses[r].device(), Device::cpu(r));
    EXPECT_FLOAT_EQ(losses[r].item<float>(), (10.0f + static_cast<float>(r)) / (4.0f * static_cast<float>(n())));
    total += losses[r].item<float>();
  }
  // Summed over the replicas, it is the mean over the global batch.
  const float global_sum = 10.0f * static_cast<float>(n()) + static_cast<float>(n() * (n() - 1) / 2);
  EXPECT_FLOAT_EQ(total, global_sum / (4.0f * static_cast<float>(n())));
}

TEST_P(ComputeAverageLoss, GivenGlobalBatchSizeAndLossesOfHigherRank) {
  MirroredStrategy strategy(cpu_devices(n()));
  PerReplica<Tensor> losses = strategy.run([] {
    return nn::compute_average_loss(Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, Shape{3, 2}), 7);
  });
  for (int r = 0; r < n(); ++r) EXPECT_DOUBLE_EQ(losses[r].item<double>(), 3.0);
}

TEST(ComputeAverageLossOutsideReplicas, DefaultAndCrossReplicaContext) {
  EXPECT_FLOAT_EQ(nn::compute_average_loss(Tensor::from_vector<float>({1, 2, 3})).item<float>(), 2.0f);
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  EXPECT_FLOAT_EQ(nn::compute_average_loss(Tensor::from_vector<float>({1, 2, 3}), 4).item<float>(), 1.5f);
  expect_error<FailedPreconditionError>(
      [] { (void)nn::compute_average_loss(Tensor::from_vector<float>({1, 2, 3})); },
      {"nn::compute_average_loss: called without global_batch_size in the cross-replica context of "
       "MirroredStrategy(CPU:0, CPU:1)",
       "call it inside the fn passed to Strategy::run, or pass the global batch size"});
}

TEST(ComputeAverageLossOutsideReplicas, Errors) {
  expect_error<InvalidArgumentError>([] { (void)nn::compute_average_loss(Tensor()); },
                                     {"nn::compute_average_loss: per_example_loss is an undefined Tensor"});
  expect_error<InvalidArgumentError>([] { (void)nn::compute_average_loss(Tensor::scalar<float>(1)); },
                                     {"nn::compute_average_loss: per_example_loss has rank 0; it needs rank >= 1"});
  expect_error<InvalidArgumentError>(
      [] { (void)nn::compute_average_loss(Tensor::from_vector<int>({1, 2})); },
      {"nn::compute_average_loss: per_example_loss has dtype int32; it needs a floating-point dtype"});
  expect_error<InvalidArgumentError>(
      [] { (void)nn::compute_average_loss(Tensor::from_vector<float>({1, 2}), 0); },
      {"nn::compute_average_loss: the global batch size is 0; it must be positive"});
  expect_error<InvalidArgumentError>(
      [] { (void)nn::compute_average_loss(Tensor::zeros(DType::kFloat32, Shape{0})); },
      {"nn::compute_average_loss: the global batch size is 0; it must be positive"});
}

}  // namespace
}  // namespace distribute
