// The rows of docs/errors.md (errors_test.cc) on GPUs.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "distribute/config.h"
#include "distribute/distribute.h"
#include "errors_test.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_row;

// ---------------------------------------------------------------------------------------------
// GPUs. Rows that need a GPU (or a build without CUDA or NCCL) skip elsewhere with the reason.

TEST(Errors, E79_GpuThatDoesNotExist) {
  if (!DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has no GPU backend (row E13 applies)";
  const std::string missing = "GPU:" + std::to_string(list_logical_gpus().size());
  expect_row<OutOfRangeError>("E79", [&] { MirroredStrategy strategy({missing}); });
  expect_row<OutOfRangeError>("E79", [&] { OneDeviceStrategy strategy(missing); });
  expect_row<OutOfRangeError>("E79", [&] { Tensor::empty(DType::kFloat32, Shape{2}, Device::parse(missing)); });
}

TEST(Errors, E80_MirroredStrategyMixesCpusAndGpus) {
  if (!DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has no GPU backend (row E13 applies)";
  expect_row<InvalidArgumentError>("E80", [] { MirroredStrategy strategy({"CPU:0", "GPU:0"}); });
}

TEST(Errors, E81_NcclOnCpuDevices) {
  MirroredStrategyOptions options;
  options.cross_device_ops = CrossDeviceOps::kNcclAllReduce;
  expect_row<InvalidArgumentError>("E81", [&] { MirroredStrategy strategy(cpu_devices(2), options); });
}

TEST(Errors, E82_NcclOverLogicalGpusOfOnePhysicalGpu) {
  SKIP_UNLESS_GPU();
  if (!DISTRIBUTE_HAS_NCCL) GTEST_SKIP() << "this build has no NCCL (row E83 applies)";
  set_logical_device_configuration(0, {{}, {}});
  MirroredStrategyOptions options;
  options.cross_device_ops = CrossDeviceOps::kNcclAllReduce;
  expect_row<InvalidArgumentError>("E82", [&] { MirroredStrategy strategy({"GPU:0", "GPU:1"}, options); });
}

TEST(Errors, E83_NcclInABuildWithoutIt) {
  SKIP_UNLESS_GPU();
  if (DISTRIBUTE_HAS_NCCL) GTEST_SKIP() << "this build has NCCL";
  MirroredStrategyOptions options;
  options.cross_device_ops = CrossDeviceOps::kNcclAllReduce;
  expect_row<UnimplementedError>("E83", [&] { MirroredStrategy strategy({"GPU:0"}, options); });
}

TEST(Errors, E84_LogicalConfigurationAfterFirstUse) {
  SKIP_UNLESS_GPU();
  (void)Tensor::empty(DType::kFloat32, Shape{1}, Device::gpu(0));
  expect_row<FailedPreconditionError>("E84", [] { set_logical_device_configuration(0, {{}, {}}); });
}

TEST(Errors, E85_LogicalConfigurationOfAMissingPhysicalGpu) {
  if (!DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has no GPU backend (row E87 applies)";
  expect_row<OutOfRangeError>("E85", [] { set_logical_device_configuration(num_physical_gpus(), {{}}); });
}

TEST(Errors, E86_LogicalConfigurationWithAnEmptyList) {
  SKIP_UNLESS_GPU();
  expect_row<InvalidArgumentError>("E86", [] { set_logical_device_configuration(0, {}); });
}

TEST(Errors, E87_LogicalConfigurationWithoutCuda) {
  if (DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has a GPU backend";
  expect_row<UnimplementedError>("E87", [] { set_logical_device_configuration(0, {{}, {}}); });
}

TEST(Errors, E88_CollectiveOnATensorOfAnotherDevice) {
  SKIP_UNLESS_GPU();
  Tensor host = Tensor::from_vector<float>({1, 2});
  MirroredStrategy strategy({"GPU:0"});
  expect_row<InvalidArgumentError>("E88", [&] {
    strategy.run([&] { return get_replica_context()->all_reduce(ReduceOp::kSum, host); });
  });
}

TEST(Errors, E89_FromBlobWithNullData) {
  expect_row<InvalidArgumentError>("E89", [] { Tensor::from_blob(nullptr, DType::kFloat32, Shape{2}, Device::cpu()); });
}

TEST(Errors, E91_ViewOfAStridedEigenMap) {
  std::vector<float> memory(16);
  Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>> corner(memory.data(), 2, 2, Eigen::OuterStride<>(4));
  expect_row<InvalidArgumentError>("E91", [&] { (void)Tensor::view(corner); });
}

TEST(Errors, E92_InPlaceAllReduceOfAScalar) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E92", [&] {
    strategy.run([] {
      std::tuple<Tensor, double> value{Tensor::scalar(1.0f), 2.0};
      get_replica_context()->all_reduce_in_place(ReduceOp::kSum, value);
    });
  });
}

TEST(Errors, E93_ImplementationThatIsNotTheStrategys) {
  MirroredStrategy strategy(cpu_devices(2));
  CommunicationOptions nccl;
  nccl.implementation = CommunicationImplementation::kNccl;
  expect_row<InvalidArgumentError>(
      "E93", [&] { strategy.run([&] { (void)get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, nccl); }); },
      {"all_reduce #1: "});
  const PerReplica<Tensor> values{Tensor::scalar(1.0f), Tensor::scalar(2.0f)};
  expect_row<InvalidArgumentError>(
      "E93", [&] { (void)strategy.extended().reduce_to(ReduceOp::kSum, values, Device::cpu(), nccl); },
      {"extended().reduce_to: "});
  // The strategy stays usable, and RING is the shared-memory backend's own.
  CommunicationOptions ring;
  ring.implementation = CommunicationImplementation::kRing;
  auto sums = strategy.run([&] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, ring); });
  EXPECT_EQ(sums[1], 2.0f);
}

TEST(Errors, E124_CompressionOfACollectiveThatDoesNotCompress) {
  MirroredStrategy strategy(cpu_devices(2));
  const CommunicationOptions bf16{.compression = Compression::kBfloat16};
  expect_row<InvalidArgumentError>(
      "E124", [&] { strategy.run([&] { (void)get_replica_context()->all_gather(Tensor::from_vector<float>({1}), 0, bf16); }); },
      {"all_gather #1: CommunicationOptions::compression is BF16 but only all_reduce and reduce_scatter compress (the "
       "others move values unchanged)"});
  expect_row<InvalidArgumentError>(
      "E124",
      [&] { strategy.run([&] { (void)get_replica_context()->all_gather_async(Tensor::from_vector<float>({1}), 0, bf16); }); },
      {"all_gather #1: "});
  const PerReplica<Tensor> values{Tensor::scalar(1.0f), Tensor::scalar(2.0f)};
  expect_row<InvalidArgumentError>(
      "E124", [&] { (void)strategy.extended().reduce_to(ReduceOp::kSum, values, Device::cpu(), bf16); },
      {"extended().reduce_to: CommunicationOptions::compression is BF16 but only all_reduce and reduce_scatter in a "
       "replica's fn compress"});
  // The strategy stays usable, and in one process an all_reduce takes it (nothing crosses a link).
  auto sums = strategy.run([&] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, bf16); });
  EXPECT_EQ(sums[1], 2.0f);
}

TEST(Errors, E94_ImplementationThatContradictsCrossDeviceOps) {
  MirroredStrategyOptions options;
  options.communication.implementation = CommunicationImplementation::kRing;
  options.cross_device_ops = CrossDeviceOps::kReductionToOneDevice;
  expect_row<InvalidArgumentError>("E94", [&] { MirroredStrategy strategy(cpu_devices(2), options); });
}

TEST(Errors, E90_LogicalGpuMemoryLimit) {
  SKIP_UNLESS_GPU();
  set_logical_device_configuration(0, {{.memory_limit = 1 << 20}});
  expect_row<ResourceExhaustedError>("E90", [] { Tensor::empty(DType::kFloat32, Shape{1 << 19}, Device::gpu(0)); });
}

}  // namespace
}  // namespace distribute
