// The rows of docs/errors.md (errors_test.cc) on datasets and distributed input.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "errors_test.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_row;
using testing::zeros;

// ---------------------------------------------------------------------------------------------
// Datasets and distributed input.

// A generator dataset yielding `elements`, then the end.
template <class T>
data::Dataset<T> dataset_of(std::vector<T> elements) {
  return data::Dataset<T>::from_generator([elements] {
    return std::function<std::optional<T>()>([elements, i = std::size_t{0}]() mutable -> std::optional<T> {
      if (i == elements.size()) return std::nullopt;
      return elements[i++];
    });
  });
}

data::Dataset<Tensor> five_to_eight() {
  return data::Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>({5, 6, 7, 8}));
}

TEST(Errors, E95_SliceOutsideTheRows) {
  const Tensor t = zeros(Shape{4, 3});
  expect_row<OutOfRangeError>("E95", [&] { (void)t.slice(2, 5); });
}

TEST(Errors, E96_SliceOfAScalar) {
  expect_row<InvalidArgumentError>("E96", [] { (void)Tensor::scalar(1.0f).slice(0, 0); });
}

TEST(Errors, E97_DatasetSizeBelowOne) {
  expect_row<InvalidArgumentError>("E97", [] { (void)data::range(4).batch(0); });
}

TEST(Errors, E98_ShardIndexOutOfRange) {
  expect_row<InvalidArgumentError>("E98", [] { (void)data::range(4).shard(2, 2); });
}

TEST(Errors, E99_CountBelowMinusOne) {
  expect_row<InvalidArgumentError>("E99", [] { (void)data::range(4).take(-2); });
}

TEST(Errors, E100_RangeWithStepZero) {
  expect_row<InvalidArgumentError>("E100", [] { (void)data::range(0, 4, 0); });
}

TEST(Errors, E101_SlicesOfLeavesWithOtherRows) {
  using Pair = std::pair<Tensor, Tensor>;
  expect_row<InvalidArgumentError>("E101", [] {
    (void)data::Dataset<Pair>::from_tensor_slices({zeros(Shape{4}), zeros(Shape{3, 2})});
  });
}

TEST(Errors, E102_SlicesOfAScalar) {
  expect_row<InvalidArgumentError>("E102",
                                   [] { (void)data::Dataset<Tensor>::from_tensor_slices(Tensor::scalar(1.0f)); });
}

TEST(Errors, E103_SlicesOfNoTensor) {
  expect_row<InvalidArgumentError>("E103", [] { (void)data::Dataset<std::vector<Tensor>>::from_tensor_slices({}); });
}

TEST(Errors, E104_UndefinedLeafInADataset) {
  using Pair = std::pair<Tensor, Tensor>;
  expect_row<InvalidArgumentError>("E104",
                                   [] {
                                     (void)data::Dataset<Pair>::from_tensor_slices({zeros(Shape{1}), Tensor()});
                                   },
                                   {"Dataset::from_tensor_slices: leaf 1"});
  expect_row<InvalidArgumentError>(
      "E104",
      [] {
        (void)dataset_of<Tensor>({zeros(Shape{}), Tensor()}).batch(2).make_iterator().get_next();
      },
      {"Dataset::batch: leaf 0 of element 1 of a batch"});
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>(
      "E104",
      [&] {
        (void)strategy.experimental_distribute_dataset(dataset_of<Pair>({{zeros(Shape{2}), Tensor()}}))
            .make_iterator()
            .get_next();
      },
      {"experimental_distribute_dataset: leaf 1 of an element"});
}

TEST(Errors, E105_EmptyGenerator) {
  expect_row<InvalidArgumentError>("E105", [] { (void)data::Dataset<Tensor>::from_generator(nullptr); });
}

TEST(Errors, E106_BatchOfOtherShapes) {
  auto it = dataset_of<Tensor>({zeros(Shape{2}), zeros(Shape{3})}).batch(2).make_iterator();
  expect_row<InvalidArgumentError>("E106", [&] { (void)it.get_next(); });
}

TEST(Errors, E107_BatchOfOtherStructures) {
  using List = std::vector<Tensor>;
  auto it = dataset_of<List>({List{zeros(Shape{})}, List{zeros(Shape{}), zeros(Shape{})}}).batch(2).make_iterator();
  expect_row<InvalidArgumentError>("E107", [&] { (void)it.get_next(); });
}

TEST(Errors, E108_BatchOfGpuTensors) {
  SKIP_UNLESS_GPU();
  auto it = dataset_of<Tensor>({Tensor::zeros(DType::kFloat32, Shape{2}, Device::gpu(0))}).batch(2).make_iterator();
  expect_row<InvalidArgumentError>("E108", [&] { (void)it.get_next(); });
}

TEST(Errors, E109_GetNextAtTheEnd) {
  auto it = five_to_eight().take(0).make_iterator();
  expect_row<OutOfRangeError>("E109", [&] { (void)it.get_next(); }, {"data::Iterator::get_next"});
  MirroredStrategy strategy(cpu_devices(2));
  auto distributed = strategy.experimental_distribute_dataset(five_to_eight().batch(4)).make_iterator();
  (void)distributed.get_next();
  expect_row<OutOfRangeError>("E109", [&] { (void)distributed.get_next(); }, {"DistributedIterator::get_next"});
}

TEST(Errors, E110_IteratingInsideAReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  const auto ds = strategy.experimental_distribute_dataset(five_to_eight().batch(2));
  auto it = ds.make_iterator();
  strategy.run([&] {
    expect_row<FailedPreconditionError>("E110", [&] { (void)it.get_next(); }, {"DistributedIterator::get_next"});
    expect_row<FailedPreconditionError>("E110", [&] { (void)ds.begin(); }, {"DistributedDataset::make_iterator"});
  });
}

TEST(Errors, E111_InputBufferBelowOne) {
  MirroredStrategy strategy(cpu_devices(2));
  InputOptions options;
  options.experimental_per_replica_buffer_size = 0;
  expect_row<InvalidArgumentError>("E111",
                                   [&] { (void)strategy.experimental_distribute_dataset(five_to_eight(), options); });
}

TEST(Errors, E112_NoWorkerDevices) {
  expect_row<InvalidArgumentError>("E112", [] { (void)DistributedDataset<Tensor>::from_dataset({}, five_to_eight()); });
}

TEST(Errors, E113_SplittingScalars) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>(
      "E113", [&] { (void)strategy.experimental_distribute_dataset(five_to_eight()).make_iterator().get_next(); });
}

TEST(Errors, E114_SplittingLeavesWithOtherRows) {
  using Pair = std::pair<Tensor, Tensor>;
  MirroredStrategy strategy(cpu_devices(2));
  const auto uneven = dataset_of<Pair>({{zeros(Shape{2}), zeros(Shape{3})}});
  expect_row<InvalidArgumentError>(
      "E114", [&] { (void)strategy.experimental_distribute_dataset(uneven).make_iterator().get_next(); });
}

TEST(Errors, E115_NoEmptyBatchForAScalar) {
  MirroredStrategy strategy(cpu_devices(2));
  auto it =
      strategy.distribute_datasets_from_function([](const InputContext&) { return data::range(3); }).make_iterator();
  (void)it.get_next();
  expect_row<InvalidArgumentError>("E115", [&] { (void)it.get_next(); });
}

TEST(Errors, E116_DistributingInsideAReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  strategy.run([&] {
    expect_row<FailedPreconditionError>(
        "E116", [&] { (void)strategy.experimental_distribute_dataset(five_to_eight().batch(2)); },
        {"experimental_distribute_dataset"});
    expect_row<FailedPreconditionError>(
        "E116",
        [&] { (void)strategy.distribute_datasets_from_function([](const InputContext&) { return five_to_eight(); }); },
        {"distribute_datasets_from_function"});
  });
}

TEST(Errors, E117_ShapeWithTooManyElements) {
  constexpr std::int64_t k2_40 = std::int64_t{1} << 40;
  expect_row<InvalidArgumentError>("E117", [] { (void)Shape{k2_40, k2_40}; });
  expect_row<InvalidArgumentError>("E117", [] { (void)Shape{k2_40, 1}.with_dim(1, k2_40); });
}

TEST(Errors, E118_TensorWithTooManyBytes) {
  const Shape huge{std::int64_t{1} << 62};
  expect_row<InvalidArgumentError>("E118", [&] { (void)Tensor::zeros(DType::kFloat32, huge); }, {"Tensor::empty"});
  float x = 0;
  expect_row<InvalidArgumentError>("E118", [&] { (void)Tensor::from_blob(&x, huge); }, {"Tensor::from_blob"});
}

TEST(Errors, E119_TimeoutThatIsNegativeOrNotFinite) {
  const CommunicationOptions bad{.timeout = std::chrono::duration<double>(-1)};
  expect_row<InvalidArgumentError>(
      "E119", [&] { MirroredStrategy strategy(cpu_devices(2), MirroredStrategyOptions{.communication = bad}); },
      {"MirroredStrategy: options.communication.timeout"});
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>(
      "E119", [&] { strategy.run([&] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, bad); }); },
      {"CommunicationOptions::timeout"});
}

TEST(Errors, E120_ScopeDestroyedOnAnotherThread) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope* scope = nullptr;
  std::thread([&] { scope = new StrategyScope(strategy.scope()); }).join();
  expect_row<FailedPreconditionError>("E120", [&] { delete scope; });
}

TEST(Errors, E121_PerReplicaInputOfOneDataset) {
  MirroredStrategy strategy(cpu_devices(2));
  InputOptions options;
  options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  expect_row<UnimplementedError>(
      "E121", [&] { (void)strategy.experimental_distribute_dataset(five_to_eight().batch(2), options); });
}

TEST(Errors, E122_PlaceDatasetOnDeviceOfOnePipeline) {
  MirroredStrategy strategy(cpu_devices(2));
  InputOptions options;
  options.experimental_fetch_to_device = false;
  options.experimental_place_dataset_on_device = true;
  expect_row<InvalidArgumentError>("E122", [&] {
    (void)strategy.distribute_datasets_from_function([](const InputContext&) { return five_to_eight(); }, options);
  });
}

TEST(Errors, E123_PlaceDatasetOnDeviceAndFetchToDevice) {
  MirroredStrategy strategy(cpu_devices(2));
  InputOptions options;
  options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  options.experimental_place_dataset_on_device = true;
  expect_row<InvalidArgumentError>("E123", [&] {
    (void)strategy.distribute_datasets_from_function([](const InputContext&) { return five_to_eight(); }, options);
  });
}

}  // namespace
}  // namespace distribute
