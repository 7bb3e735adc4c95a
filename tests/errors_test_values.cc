// The rows of docs/errors.md (errors_test.cc) on devices and strategies, shapes and tensors,
// distributed values and the value / input contexts, reduce ops and the cross-replica reduce and
// gather.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "distribute/config.h"
#include "distribute/distribute.h"
#include "errors_test.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;
using testing::expect_row;
using testing::per_replica_zeros;
using testing::zeros;

// ---------------------------------------------------------------------------------------------
// Devices and strategies.

TEST(Errors, E01_EmptyDeviceString) {
  expect_row<InvalidArgumentError>("E01", [] { Device::parse(""); });
}

TEST(Errors, E02_DeviceStringWithoutColon) {
  expect_row<InvalidArgumentError>("E02", [] { Device::parse("CPU"); });
}

TEST(Errors, E03_ShortNameWithSeveralParts) {
  expect_row<InvalidArgumentError>("E03", [] { Device::parse("CPU:0/GPU:1"); });
}

TEST(Errors, E04_UnknownDeviceType) {
  expect_row<InvalidArgumentError>("E04", [] { Device::parse("TPU:0"); });
}

TEST(Errors, E05_DeviceIndexNotAnInteger) {
  for (const std::string spec :
       {"CPU:-1", "CPU:x", "GPU:70000", "CPU:", "CPU:1.5", "/job:localhost/replica:x/task:0/device:CPU:0",
        "/job:localhost/task:-2/device:CPU:0"}) {
    SCOPED_TRACE(spec);
    expect_row<InvalidArgumentError>("E05", [&] { Device::parse(spec); }, {"\"" + spec + "\""});
  }
}

TEST(Errors, E06_DevicePartWithoutIndex) {
  expect_row<InvalidArgumentError>("E06", [] { Device::parse("/device:CPU"); });
}

TEST(Errors, E07_EmptyJobName) {
  expect_row<InvalidArgumentError>("E07", [] { Device::parse("/job:/device:CPU:0"); });
}

TEST(Errors, E08_FullNameWithoutDevice) {
  expect_row<InvalidArgumentError>("E08", [] { Device::parse("/job:localhost/replica:0/task:0"); },
                                   {"invalid device string \"/job:localhost/replica:0/task:0\""});
}

TEST(Errors, E09_FullNameWithTwoDevices) {
  expect_row<InvalidArgumentError>("E09", [] { Device::parse("/device:CPU:0/device:GPU:1"); });
}

TEST(Errors, E10_DeviceIndexOutOfRange) {
  expect_row<InvalidArgumentError>("E10", [] { Device::cpu(-1); });
  expect_row<InvalidArgumentError>("E10", [] { (void)Device(Device::Type::kGpu, -1); });
}

TEST(Errors, E11_StrategyWithInvalidDeviceString) {
  expect_row<InvalidArgumentError>("E11",
                                   [] {
                                     MirroredStrategy strategy({"CPU:0", "CPU-1"});
                                   },
                                   {"\"CPU-1\"", "has no ':'"});
  expect_row<InvalidArgumentError>("E11", [] { OneDeviceStrategy strategy("/device:XPU:0"); },
                                   {"unknown device type \"XPU\""});
}

TEST(Errors, E12_DuplicateDevices) {
  expect_row<InvalidArgumentError>(
      "E12",
      [] {
        MirroredStrategy strategy({"CPU:0", "/job:localhost/replica:0/task:0/device:CPU:0"});
      },
      {"MirroredStrategy: device \"/job:localhost/replica:0/task:0/device:CPU:0\""});
  expect_row<InvalidArgumentError>("E12",
                                   [] {
                                     MirroredStrategy strategy({"CPU:1", "CPU:0", "cpu:0"});
                                   },
                                   {"device \"cpu:0\""});
}

TEST(Errors, E13_GpuDeviceInCpuOnlyBuild) {
#if DISTRIBUTE_HAS_CUDA
  GTEST_SKIP() << "this build has a GPU backend";
#endif
  expect_row<UnimplementedError>("E13", [] { MirroredStrategy strategy({"GPU:0", "GPU:1"}); });
}

TEST(Errors, E14_OneDeviceStrategyOnGpuInCpuOnlyBuild) {
#if DISTRIBUTE_HAS_CUDA
  GTEST_SKIP() << "this build has a GPU backend";
#endif
  expect_row<UnimplementedError>("E14", [] { OneDeviceStrategy strategy("GPU:0"); });
}

TEST(Errors, E15_TensorOnGpuInCpuOnlyBuild) {
#if DISTRIBUTE_HAS_CUDA
  GTEST_SKIP() << "this build has a GPU backend";
#endif
  const Device gpu = Device::gpu(0);
  expect_row<UnimplementedError>("E15", [&] { Tensor::empty(DType::kFloat32, Shape{2}, gpu); });
  expect_row<UnimplementedError>("E15", [&] { Tensor::zeros(DType::kInt32, Shape{2, 2}, gpu); });
  expect_row<UnimplementedError>("E15", [&] { Tensor::from_vector<float>({1, 2}, Shape{2}, gpu); });
  expect_row<UnimplementedError>("E15", [&] { Tensor::scalar(1.0, gpu); });
  expect_row<UnimplementedError>("E15", [&] { Tensor::from_vector<float>({1, 2}).to(gpu); });
}

// ---------------------------------------------------------------------------------------------
// Shapes and tensors.

TEST(Errors, E16_ShapeWithNegativeDimension) {
  expect_row<InvalidArgumentError>("E16", [] { (void)Shape{2, -1}; });
  expect_row<InvalidArgumentError>("E16", [] { (void)Shape(std::vector<std::int64_t>{4, -1, 3}); });
}

TEST(Errors, E17_ShapeIndexOutOfRange) {
  const Shape shape{2, 3};
  expect_row<OutOfRangeError>("E17", [&] { (void)shape[2]; }, {"Shape(2, 3)[2]"});
  expect_row<OutOfRangeError>("E17", [&] { (void)shape[-3]; }, {"Shape(2, 3)[-3]"});
  EXPECT_EQ(shape[-1], 3);  // the limits themselves are valid
}

TEST(Errors, E18_FromVectorSizeMismatch) {
  expect_row<InvalidArgumentError>("E18", [] { Tensor::from_vector<float>({1, 2, 3, 4, 5}, Shape{2, 3}); });
}

TEST(Errors, E19_ItemOfTensorWithoutExactlyOneElement) {
  expect_row<InvalidArgumentError>("E19", [] { (void)Tensor::from_vector<float>({1, 2, 3}).item<float>(); });
  expect_error<InvalidArgumentError>([] { (void)Tensor::from_vector<float>({}).item<float>(); },
                                     {"Tensor::item: the tensor has shape (0,) (0 elements)"});
}

TEST(Errors, E20_ToVectorWithWrongType) {
  expect_row<InvalidArgumentError>("E20", [] { (void)Tensor::from_vector<float>({1, 2}).to_vector<std::int32_t>(); });
}

TEST(Errors, E21_HostViewWithWrongType) {
  const Tensor t = Tensor::from_vector<float>({1, 2});
  expect_row<InvalidArgumentError>("E21", [&] { (void)t.data<double>(); });
  expect_row<InvalidArgumentError>("E21", [&] { (void)t.flat<double>(); });
}

TEST(Errors, E22_MatrixOfTensorWhoseRankIsNotTwo) {
  expect_row<InvalidArgumentError>("E22", [] { (void)Tensor::from_vector<float>({1, 2, 3}).matrix<float>(); });
}

TEST(Errors, E23_ReshapeToOtherElementCount) {
  expect_row<InvalidArgumentError>("E23", [] { (void)zeros(Shape{2, 3}).reshape(Shape{4}); });
}

TEST(Errors, E24_UndefinedTensor) {
  const Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.to_vector<float>(); }, {"Tensor::to_vector"});
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.item<float>(); }, {"Tensor::item"});
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.device(); }, {"Tensor::device"});
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.clone(); });
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.reshape(Shape{}); }, {"Tensor::reshape"});
}

// ---------------------------------------------------------------------------------------------
// Distributed values and the value / input contexts.

TEST(Errors, E25_EmptyDistributedValues) {
  expect_row<InvalidArgumentError>("E25", [] { PerReplica<Tensor> values(std::vector<Tensor>{}); });
  expect_row<InvalidArgumentError>("E25", [] { Mirrored<float> values(1.0f, 0); });
}

TEST(Errors, E26_DistributedValuesIndexOutOfRange) {
  const PerReplica<int> values({7, 8});
  expect_row<OutOfRangeError>("E26", [&] { (void)values[2]; });
  expect_error<OutOfRangeError>([&] { (void)values[-1]; }, {"replica -1 does not exist"});
}

TEST(Errors, E27_ValueContextWithoutReplicas) {
  expect_row<InvalidArgumentError>("E27", [] { ValueContext context(0, 0); });
}

TEST(Errors, E28_ValueContextReplicaIdOutOfRange) {
  expect_row<InvalidArgumentError>("E28", [] { ValueContext context(2, 2); });
  expect_error<InvalidArgumentError>([] { ValueContext context(-1, 2); },
                                     {"ValueContext: replica_id_in_sync_group -1 is not in [0, 2)"});
}

TEST(Errors, E29_InputContextWithoutPipelines) {
  expect_row<InvalidArgumentError>("E29", [] { InputContext context(0, 0, 1); });
}

TEST(Errors, E30_InputContextPipelineIdOutOfRange) {
  expect_row<InvalidArgumentError>("E30", [] { InputContext context(2, 2, 1); });
}

TEST(Errors, E31_InputContextWithoutReplicas) {
  expect_row<InvalidArgumentError>("E31", [] { InputContext context(1, 0, 0); });
}

TEST(Errors, E32_BatchSizeNotDivisible) {
  const InputContext context(1, 0, 4);
  expect_row<InvalidArgumentError>("E32", [&] { (void)context.get_per_replica_batch_size(10); });
  EXPECT_EQ(context.get_per_replica_batch_size(12), 3);
}

TEST(Errors, E33_NegativeBatchSize) {
  expect_row<InvalidArgumentError>("E33", [] { (void)InputContext(1, 0, 4).get_per_replica_batch_size(-8); });
}

// ---------------------------------------------------------------------------------------------
// Reduce ops and the cross-replica reduce / gather.

TEST(Errors, E34_UnknownReduceOpName) {
  expect_row<InvalidArgumentError>("E34", [] { parse_reduce_op("max"); }, {"\"max\""});
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E34",
                                   [&] {
                                     (void)strategy.reduce("Max", PerReplica<float>({1.0f, 2.0f}), std::nullopt);
                                   },
                                   {"\"Max\""});
  expect_row<InvalidArgumentError>(
      "E34", [&] { strategy.run([] { get_replica_context()->all_reduce("prod", 1.0f); }); }, {"\"prod\""});
}

TEST(Errors, E35_ReduceAxisOutOfRange) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E35", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2, 3}, Shape{2, 3}}), 2);
  });
}

TEST(Errors, E36_ReduceAxisOfScalars) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E36", [&] {
    (void)strategy.reduce(ReduceOp::kSum, PerReplica<float>({1.0f, 2.0f}), 0);
  });
}

TEST(Errors, E37_GatherAxisOutOfRange) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E37", [&] { strategy.gather(per_replica_zeros({Shape{2, 2}, Shape{2, 2}}), -3); });
}

TEST(Errors, E38_GatherOfScalars) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E38", [&] { strategy.gather(per_replica_zeros({Shape{}, Shape{}}), 0); });
}

TEST(Errors, E39_ReduceDTypeMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E39", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2}, Shape{2}}, {DType::kFloat32, DType::kInt32}),
                    std::nullopt);
  });
}

TEST(Errors, E40_ReduceRankMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E40", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2}, Shape{2, 1}}), std::nullopt);
  });
}

TEST(Errors, E41_ReduceShapeMismatchWithoutAxis) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E41", [&] {
    strategy.reduce(ReduceOp::kMean, per_replica_zeros({Shape{2}, Shape{3}}), std::nullopt);
  });
  // Along an axis the same values are fine: the sizes may differ there.
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2}, Shape{3}}), 0).shape(), Shape{});
}

TEST(Errors, E42_ReduceShapeMismatchOutsideAxis) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E42", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2, 2}, Shape{3, 3}}), 0);
  });
}

TEST(Errors, E43_GatherDTypeMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E43", [&] {
    strategy.gather(per_replica_zeros({Shape{2, 2}, Shape{2, 2}}, {DType::kFloat32, DType::kFloat64}), 0);
  });
}

TEST(Errors, E44_GatherShapeMismatchOutsideAxis) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E44", [&] { strategy.gather(per_replica_zeros({Shape{2, 2}, Shape{2, 3}}), 0); });
}

TEST(Errors, E45_UndefinedComponent) {
  MirroredStrategy strategy(cpu_devices(2));
  const PerReplica<Tensor> values({zeros(Shape{2}), Tensor()});
  expect_row<InvalidArgumentError>("E45", [&] { strategy.reduce(ReduceOp::kSum, values, std::nullopt); },
                                   {"Strategy::reduce"});
  expect_row<InvalidArgumentError>("E45", [&] { strategy.gather(values, 0); }, {"Strategy::gather"});
}

TEST(Errors, E46_NonDistributedSumOnSeveralReplicas) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E46", [&] { strategy.reduce(ReduceOp::kSum, Tensor::scalar(1.0f), std::nullopt); });
  expect_row<InvalidArgumentError>("E46", [&] { (void)strategy.reduce(ReduceOp::kSum, 1.0f, std::nullopt); });
  // MEAN of a value that is the same everywhere is the value.
  EXPECT_EQ(strategy.reduce(ReduceOp::kMean, 3.0f, std::nullopt), 3.0f);
}

TEST(Errors, E47_ReduceOfValuesForAnotherReplicaCount) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E47", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2}, Shape{2}, Shape{2}}), std::nullopt);
  });
}

TEST(Errors, E48_GatherOfValuesForAnotherReplicaCount) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E48", [&] {
    strategy.gather(per_replica_zeros({Shape{2}, Shape{2}, Shape{2}}), 0);
  });
}

TEST(Errors, E49_RunArgumentForAnotherReplicaCount) {
  MirroredStrategy strategy(cpu_devices(2));
  std::atomic<int> calls{0};
  expect_row<InvalidArgumentError>("E49", [&] {
    strategy.run([&](float, const Tensor&) { ++calls; }, 1.0f, per_replica_zeros({Shape{2}, Shape{2}, Shape{2}}));
  });
  EXPECT_EQ(calls.load(), 0);  // checked before any replica starts
}

TEST(Errors, E50_UpdateOfValueWithOtherComponentCount) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E50", [&] {
    strategy.extended().update(Mirrored<Tensor>(Tensor::scalar(1.0f), 3), [](const Tensor& t) { return t; });
  });
}

}  // namespace
}  // namespace distribute
