// data::Dataset: every source and transformation with exact values, re-iteration, the shuffle's
// determinism and buffer, user exceptions (their type, the element they stop at, later calls),
// the prefetch thread's shutdown, and the argument errors with their messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

// A registered struct of tensors, and one with a member that is not a Tensor.
namespace dataset_test_types {
struct Example {
  distribute::Tensor image;
  distribute::Tensor label;
};
struct Weighted {
  distribute::Tensor value;
  float weight;
};
}  // namespace dataset_test_types

template <>
struct distribute::nest::StructFields<dataset_test_types::Example> {
  static constexpr auto members =
      std::make_tuple(&dataset_test_types::Example::image, &dataset_test_types::Example::label);
  static constexpr std::array<const char*, 2> names = {"image", "label"};
};
template <>
struct distribute::nest::StructFields<dataset_test_types::Weighted> {
  static constexpr auto members =
      std::make_tuple(&dataset_test_types::Weighted::value, &dataset_test_types::Weighted::weight);
};

namespace distribute {
namespace {

using dataset_test_types::Example;

static_assert(data::TensorNest<Tensor>);
static_assert(data::TensorNest<std::pair<Tensor, std::vector<Tensor>>>);
static_assert(data::TensorNest<std::map<std::string, std::tuple<Tensor, std::array<Tensor, 2>>>>);
static_assert(data::TensorNest<Example>);
static_assert(!data::TensorNest<float>);
static_assert(!data::TensorNest<std::pair<Tensor, float>>);
static_assert(!data::TensorNest<dataset_test_types::Weighted>);
static_assert(nest::Nest<dataset_test_types::Weighted>);

using data::Dataset;
using testing::expect_error;
using testing::Watchdog;

constexpr std::chrono::milliseconds kHangLimit{20000};

// Every element of one iteration, each read back as a vector of values.
template <class E, class T>
std::vector<std::vector<E>> values(const Dataset<T>& ds) {
  std::vector<std::vector<E>> out;
  for (const Tensor& t : ds) out.push_back(t.template to_vector<E>());
  return out;
}

// One iteration of a dataset of scalars.
template <class E>
std::vector<E> scalars(const Dataset<Tensor>& ds) {
  std::vector<E> out;
  for (const Tensor& t : ds) {
    EXPECT_EQ(t.shape(), Shape{});
    out.push_back(t.item<E>());
  }
  return out;
}

std::vector<std::int64_t> iota(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(end - begin));
  std::iota(out.begin(), out.end(), begin);
  return out;
}

Dataset<Tensor> five_to_eight() {
  return Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>({5, 6, 7, 8}));
}

// A generator dataset of the scalars 0, 1, ... that throws `error` instead of element `fail_at`.
template <class E>
Dataset<Tensor> failing_at(std::int64_t fail_at, E error) {
  return Dataset<Tensor>::from_generator([fail_at, error] {
    return std::function<std::optional<Tensor>()>([fail_at, error, i = std::int64_t{0}]() mutable {
      if (i == fail_at) throw error;
      return std::optional<Tensor>(Tensor::scalar<std::int64_t>(i++));
    });
  });
}

// Not derived from std::exception: it must still come out with its own type.
struct UserFault {
  int code;
};

TEST(Dataset, FromTensorSlicesMakesViewsOfRows) {
  const Tensor source = Tensor::from_vector<float>({5, 6, 7, 8});
  std::vector<Tensor> elements;
  for (const Tensor& t : Dataset<Tensor>::from_tensor_slices(source)) elements.push_back(t);
  ASSERT_EQ(elements.size(), 4u);
  for (std::size_t i = 0; i < elements.size(); ++i) {
    EXPECT_EQ(elements[i].shape(), Shape{});
    EXPECT_EQ(elements[i].dtype(), DType::kFloat32);
    EXPECT_TRUE(elements[i].same_storage(source));
    EXPECT_EQ(elements[i].item<float>(), 5.0f + static_cast<float>(i));
  }
  EXPECT_FALSE(five_to_eight().batch_spec().has_value());
}

TEST(Dataset, FromTensorSlicesOfANestSlicesEveryLeaf) {
  const Tensor images = Tensor::from_vector<std::int32_t>({0, 1, 2, 3, 4, 5}, Shape{3, 2});
  const Tensor labels = Tensor::from_vector<std::int64_t>({10, 11, 12});
  std::map<std::string, Tensor> dict{{"x", images}, {"y", labels}};
  std::vector<std::pair<std::vector<std::int32_t>, std::int64_t>> seen;
  for (const auto& element : Dataset<std::map<std::string, Tensor>>::from_tensor_slices(dict)) {
    EXPECT_EQ(element.at("x").shape(), Shape{2});
    seen.emplace_back(element.at("x").to_vector<std::int32_t>(), element.at("y").item<std::int64_t>());
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::vector<std::int32_t>, std::int64_t>>{
                      {{0, 1}, 10}, {{2, 3}, 11}, {{4, 5}, 12}}));
}

TEST(Dataset, RegisteredStructsAreSlicedAndBatchedByMember) {
  const Example examples{Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, Shape{3, 2}),
                         Tensor::from_vector<std::int32_t>({7, 8, 9})};
  std::vector<std::vector<std::int32_t>> labels;
  std::vector<Shape> image_shapes;
  for (const Example& batch : Dataset<Example>::from_tensor_slices(examples).batch(2)) {
    labels.push_back(batch.label.to_vector<std::int32_t>());
    image_shapes.push_back(batch.image.shape());
  }
  EXPECT_EQ(labels, (std::vector<std::vector<std::int32_t>>{{7, 8}, {9}}));
  EXPECT_EQ(image_shapes, (std::vector<Shape>{Shape{2, 2}, Shape{1, 2}}));
}

TEST(Dataset, IteratingTwiceGivesTheSameElements) {
  const Dataset<Tensor> ds = five_to_eight().batch(3);
  EXPECT_EQ(values<float>(ds), (std::vector<std::vector<float>>{{5, 6, 7}, {8}}));
  EXPECT_EQ(values<float>(ds), (std::vector<std::vector<float>>{{5, 6, 7}, {8}}));
}

TEST(Dataset, BatchStacksAlongANewDimensionZero) {
  EXPECT_EQ(values<float>(five_to_eight().batch(2)), (std::vector<std::vector<float>>{{5, 6}, {7, 8}}));
  EXPECT_EQ(values<float>(five_to_eight().batch(3)), (std::vector<std::vector<float>>{{5, 6, 7}, {8}}));
  EXPECT_EQ(values<float>(five_to_eight().batch(3, true)), (std::vector<std::vector<float>>{{5, 6, 7}}));
  EXPECT_EQ(values<float>(five_to_eight().batch(5)), (std::vector<std::vector<float>>{{5, 6, 7, 8}}));
  EXPECT_TRUE(values<float>(five_to_eight().batch(5, true)).empty());

  const Dataset<Tensor> rows =
      Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<double>({0, 1, 2, 3, 4, 5}, Shape{3, 2}));
  std::vector<Shape> shapes;
  for (const Tensor& t : rows.batch(2)) shapes.push_back(t.shape());
  EXPECT_EQ(shapes, (std::vector<Shape>{Shape{2, 2}, Shape{1, 2}}));
  EXPECT_EQ(values<double>(rows.batch(2)), (std::vector<std::vector<double>>{{0, 1, 2, 3}, {4, 5}}));

  const data::BatchSpec spec = *five_to_eight().batch(3, true).batch_spec();
  EXPECT_EQ(spec.batch_size, 3);
  EXPECT_TRUE(spec.drop_remainder);
  EXPECT_EQ(five_to_eight().batch(3).batch(2).batch_spec()->batch_size, 2);
}

// batch() used to allocate batch_size rows before the first: batch(1 << 60) failed with "host
// allocation of ... bytes failed". It allocates for the rows there are, on every path (rows of
// from_tensor_slices, elements of a generator or a map).
TEST(Dataset, AHugeBatchSizeGivesOneBatchOfTheRowsThereAre) {
  const std::int64_t huge = std::int64_t{1} << 60;
  EXPECT_EQ(values<std::int64_t>(data::range(3).batch(huge)), (std::vector<std::vector<std::int64_t>>{{0, 1, 2}}));
  EXPECT_TRUE(values<std::int64_t>(data::range(3).batch(huge, true)).empty());
  EXPECT_EQ(values<float>(five_to_eight().batch(huge)), (std::vector<std::vector<float>>{{5, 6, 7, 8}}));
  const auto generated = Dataset<Tensor>::from_generator([] {
    return std::function<std::optional<Tensor>()>([i = 0]() mutable -> std::optional<Tensor> {
      if (i == 3) return std::nullopt;
      const float v = static_cast<float>(i++);
      return Tensor::from_vector<float>({v, v});
    });
  });
  std::vector<Tensor> batches;
  for (const Tensor& t : generated.batch(huge)) batches.push_back(t);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(batches[0].to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 2, 2}));
  // Split between replicas by that batch size, the rows fill replica 0 first.
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  std::vector<std::vector<std::int64_t>> parts;
  for (const PerReplica<Tensor>& step : strategy.experimental_distribute_dataset(data::range(3).batch(huge))) {
    for (const Tensor& t : step.values()) parts.push_back(t.to_vector<std::int64_t>());
  }
  EXPECT_EQ(parts, (std::vector<std::vector<std::int64_t>>{{0, 1, 2}, {}}));
}

// Batches of more bytes than batch() first allocates grow as their rows come, and stay exact.
TEST(Dataset, LargeBatchesAreExactOnEveryPath) {
  constexpr std::int64_t kRows = 700;
  constexpr std::int64_t kWidth = 2048;  // 8 KiB rows: a batch of 300 holds 2.4 MiB
  std::vector<float> source(static_cast<std::size_t>(kRows * kWidth));
  std::iota(source.begin(), source.end(), 0.0f);
  const Tensor rows = Tensor::from_vector<float>(source, Shape{kRows, kWidth});
  const auto sliced = Dataset<Tensor>::from_tensor_slices(rows);
  const auto mapped = sliced.map([](const Tensor& t) { return t.clone(); });
  for (const Dataset<Tensor>& ds : {sliced, mapped}) {
    std::int64_t next_row = 0;
    std::vector<std::int64_t> sizes;
    for (const Tensor& batch : ds.batch(300)) {
      sizes.push_back(batch.shape()[0]);
      EXPECT_EQ(batch.shape()[1], kWidth);
      const std::vector<float> got = batch.to_vector<float>();
      const auto first = source.begin() + next_row * kWidth;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), first, first + batch.shape()[0] * kWidth));
      next_row += batch.shape()[0];
    }
    EXPECT_EQ(sizes, (std::vector<std::int64_t>{300, 300, 100}));
  }
}

TEST(Dataset, BatchOfPairsKeepsTheStructure) {
  using Pair = std::pair<Tensor, Tensor>;
  const Pair source{Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, Shape{3, 2}),
                    Tensor::from_vector<std::int32_t>({7, 8, 9})};
  std::vector<Pair> batches;
  for (const Pair& b : Dataset<Pair>::from_tensor_slices(source).batch(2)) batches.push_back(b);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].first.shape(), (Shape{2, 2}));
  EXPECT_EQ(batches[0].second.to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, 8}));
  EXPECT_EQ(batches[1].first.to_vector<float>(), (std::vector<float>{4, 5}));
  EXPECT_EQ(batches[1].second.shape(), Shape{1});
}

TEST(Dataset, Range) {
  EXPECT_EQ(scalars<std::int64_t>(data::range(5)), iota(0, 5));
  EXPECT_EQ(scalars<std::int64_t>(data::range(2, 10, 3)), (std::vector<std::int64_t>{2, 5, 8}));
  EXPECT_EQ(scalars<std::int64_t>(data::range(10, 0, -3)), (std::vector<std::int64_t>{10, 7, 4, 1}));
  EXPECT_TRUE(scalars<std::int64_t>(data::range(0)).empty());
  EXPECT_TRUE(scalars<std::int64_t>(data::range(5, 2)).empty());
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(scalars<std::int64_t>(data::range(kMax - 2, kMax)), (std::vector<std::int64_t>{kMax - 2, kMax - 1}));
  EXPECT_EQ(scalars<std::int64_t>(data::range(kMin + 1, kMin, -5)), std::vector<std::int64_t>{kMin + 1});
  EXPECT_EQ(scalars<std::int64_t>(data::range(kMin, kMax, kMax)),
            (std::vector<std::int64_t>{kMin, -1, kMax - 1}));
  for (const Tensor& t : data::range(1)) EXPECT_EQ(t.dtype(), DType::kInt64);
}

TEST(Dataset, TakeSkipRepeatShard) {
  EXPECT_EQ(scalars<std::int64_t>(data::range(10).take(3)), iota(0, 3));
  EXPECT_EQ(scalars<std::int64_t>(data::range(3).take(5)), iota(0, 3));
  EXPECT_EQ(scalars<std::int64_t>(data::range(4).take(-1)), iota(0, 4));
  EXPECT_TRUE(scalars<std::int64_t>(data::range(4).take(0)).empty());
  EXPECT_EQ(scalars<std::int64_t>(data::range(10).skip(7)), iota(7, 10));
  EXPECT_TRUE(scalars<std::int64_t>(data::range(3).skip(5)).empty());
  EXPECT_TRUE(scalars<std::int64_t>(data::range(3).skip(-1)).empty());
  EXPECT_EQ(scalars<std::int64_t>(data::range(3).skip(0)), iota(0, 3));
  EXPECT_EQ(scalars<std::int64_t>(data::range(3).repeat(2)), (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(scalars<std::int64_t>(data::range(3).repeat(0)).empty());
  EXPECT_EQ(scalars<std::int64_t>(data::range(2).repeat().take(5)), (std::vector<std::int64_t>{0, 1, 0, 1, 0}));
  EXPECT_EQ(scalars<std::int64_t>(data::range(10).shard(3, 1)), (std::vector<std::int64_t>{1, 4, 7}));
  EXPECT_EQ(scalars<std::int64_t>(data::range(10).shard(3, 0)), (std::vector<std::int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(scalars<std::int64_t>(data::range(10).shard(1, 0)), iota(0, 10));
}

TEST(Dataset, RepeatingAnEmptyDatasetForeverEnds) {
  Watchdog watchdog(kHangLimit, "repeat() of an empty dataset");
  EXPECT_TRUE(scalars<std::int64_t>(data::range(0).repeat()).empty());
  EXPECT_TRUE(scalars<std::int64_t>(data::range(5).skip(-1).repeat()).empty());
}

TEST(Dataset, BatchThenRepeatAndRepeatThenBatch) {
  EXPECT_EQ(values<std::int64_t>(data::range(3).batch(2).repeat(2)),
            (std::vector<std::vector<std::int64_t>>{{0, 1}, {2}, {0, 1}, {2}}));
  EXPECT_EQ(values<std::int64_t>(data::range(3).repeat(2).batch(4)),
            (std::vector<std::vector<std::int64_t>>{{0, 1, 2, 0}, {1, 2}}));
}

TEST(Dataset, ShuffleIsAPermutationDeterminedByTheSeed) {
  const std::vector<std::int64_t> all = iota(0, 100);
  const std::vector<std::int64_t> a = scalars<std::int64_t>(data::range(100).shuffle(100, 7));
  std::vector<std::int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, all);
  EXPECT_NE(a, all);
  // A dataset made again with the same seed gives the same order; another seed another one.
  EXPECT_EQ(scalars<std::int64_t>(data::range(100).shuffle(100, 7)), a);
  EXPECT_NE(scalars<std::int64_t>(data::range(100).shuffle(100, 8)), a);
}

TEST(Dataset, ShuffleDrawsANewOrderEachIterationUnlessToldNotTo) {
  const Dataset<Tensor> reshuffled = data::range(50).shuffle(50, 3);
  const std::vector<std::int64_t> first = scalars<std::int64_t>(reshuffled);
  const std::vector<std::int64_t> second = scalars<std::int64_t>(reshuffled);
  EXPECT_NE(first, second);
  // The sequence of orders is itself determined by the seed.
  const Dataset<Tensor> again = data::range(50).shuffle(50, 3);
  EXPECT_EQ(scalars<std::int64_t>(again), first);
  EXPECT_EQ(scalars<std::int64_t>(again), second);

  const Dataset<Tensor> fixed = data::range(50).shuffle(50, 3, false);
  const std::vector<std::int64_t> order = scalars<std::int64_t>(fixed);
  EXPECT_EQ(order, first);
  EXPECT_EQ(scalars<std::int64_t>(fixed), order);
  // Each pass of a repeat is an iteration of the shuffle.
  const std::vector<std::int64_t> twice = scalars<std::int64_t>(data::range(50).shuffle(50, 3).repeat(2));
  EXPECT_EQ(std::vector<std::int64_t>(twice.begin(), twice.begin() + 50), first);
  EXPECT_EQ(std::vector<std::int64_t>(twice.begin() + 50, twice.end()), second);
}

TEST(Dataset, ShuffleDrawsFromABufferOfTheNextElements) {
  // With a buffer of k, output i is one of the first i + k inputs, and every input comes out.
  for (std::int64_t k : {1, 2, 5, 20}) {
    const std::vector<std::int64_t> out = scalars<std::int64_t>(data::range(200).shuffle(k, 11));
    ASSERT_EQ(out.size(), 200u);
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_LT(out[i], static_cast<std::int64_t>(i) + k) << "k=" << k;
    std::vector<std::int64_t> sorted = out;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, iota(0, 200));
    if (k == 1) {
      EXPECT_EQ(out, iota(0, 200));
    }
  }
}

// from_tensor_slices makes elements by index (take, skip, shard, repeat and shuffle reorder the
// indices, batch copies rows from the source); a map keeps the indices but batches elements; a
// generator has no indices. All three must give the same elements in the same order.
TEST(Dataset, RowsIndicesAndElementsGiveTheSameResults) {
  constexpr std::int64_t kRows = 37;
  const auto sliced = Dataset<Tensor>::from_tensor_slices(Tensor::from_vector(iota(0, kRows)));
  const auto mapped = sliced.map([](const Tensor& t) { return t; });
  const auto generated = data::range(kRows);
  using Pipeline = std::function<Dataset<Tensor>(const Dataset<Tensor>&)>;
  const std::vector<std::pair<std::string, Pipeline>> pipelines = {
      {"batch", [](const Dataset<Tensor>& d) { return d.batch(5); }},
      {"shuffle(1000).batch", [](const Dataset<Tensor>& d) { return d.shuffle(1000, 9).batch(4); }},
      {"shuffle(6).batch(drop)", [](const Dataset<Tensor>& d) { return d.shuffle(6, 1).batch(8, true); }},
      {"skip.take.shard", [](const Dataset<Tensor>& d) { return d.skip(3).take(30).shard(4, 1).batch(3); }},
      {"repeat.shuffle", [](const Dataset<Tensor>& d) { return d.repeat(3).shuffle(50, 2).batch(10); }},
      {"shuffle.repeat", [](const Dataset<Tensor>& d) { return d.shuffle(kRows, 4).repeat(2).batch(kRows); }},
      {"take(-1).skip(-1)", [](const Dataset<Tensor>& d) { return d.take(-1).skip(-1).batch(2); }},
  };
  for (const auto& [name, pipeline] : pipelines) {
    SCOPED_TRACE(name);
    const std::vector<std::vector<std::int64_t>> expected = values<std::int64_t>(pipeline(generated));
    EXPECT_FALSE(expected.empty() && name != "take(-1).skip(-1)");
    EXPECT_EQ(values<std::int64_t>(pipeline(sliced)), expected);
    EXPECT_EQ(values<std::int64_t>(pipeline(mapped)), expected);
  }
}

TEST(Dataset, MapAppliesFnAndMayChangeTheStructure) {
  const auto doubled = five_to_eight().map([](const Tensor& t) { return Tensor::scalar(t.item<float>() * 2); });
  EXPECT_EQ(scalars<float>(doubled), (std::vector<float>{10, 12, 14, 16}));

  const auto pairs = data::range(3).map([](const Tensor& t) {
    return std::pair<Tensor, Tensor>{t, Tensor::from_vector<float>({static_cast<float>(t.item<std::int64_t>()), 0.5f})};
  });
  static_assert(std::same_as<decltype(pairs), const Dataset<std::pair<Tensor, Tensor>>>);
  std::vector<std::vector<float>> seconds;
  for (const auto& [index, row] : pairs.batch(2)) seconds.push_back(row.to_vector<float>());
  EXPECT_EQ(seconds, (std::vector<std::vector<float>>{{0, 0.5f, 1, 0.5f}, {2, 0.5f}}));

  // The batch spec survives a map, which keeps a batch in dimension 0.
  EXPECT_EQ(five_to_eight().batch(2).map([](const Tensor& t) { return t; }).batch_spec()->batch_size, 2);
}

TEST(Dataset, FromGeneratorMakesANewGeneratorForEachIteration) {
  int passes = 0;
  const auto ds = Dataset<Tensor>::from_generator([&passes] {
    ++passes;
    return std::function<std::optional<Tensor>()>([i = 0]() mutable -> std::optional<Tensor> {
      if (i == 3) return std::nullopt;
      return Tensor::scalar<std::int32_t>(10 * i++);
    });
  });
  EXPECT_EQ(passes, 0);
  EXPECT_EQ(scalars<std::int32_t>(ds), (std::vector<std::int32_t>{0, 10, 20}));
  EXPECT_EQ(scalars<std::int32_t>(ds), (std::vector<std::int32_t>{0, 10, 20}));
  EXPECT_EQ(passes, 2);
}

TEST(Dataset, IteratorGetNextAndTheEnd) {
  data::Iterator<Tensor> it = five_to_eight().batch(3).make_iterator();
  EXPECT_EQ(it.get_next().to_vector<float>(), (std::vector<float>{5, 6, 7}));
  data::Iterator<Tensor> copy = it;  // shares the position
  EXPECT_EQ(copy.get_next().to_vector<float>(), std::vector<float>{8});
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  expect_error<OutOfRangeError>([&] { (void)it.get_next(); },
                                {"data::Iterator::get_next: End of sequence: the data has no more elements"});
  // Range-for over an iterator continues from its position.
  data::Iterator<Tensor> fresh = five_to_eight().make_iterator();
  (void)fresh.get_next();
  std::vector<float> rest;
  for (const Tensor& t : fresh) rest.push_back(t.item<float>());
  EXPECT_EQ(rest, (std::vector<float>{6, 7, 8}));
}

TEST(Dataset, AUserExceptionStopsAtItsElementWithItsTypeAndStays) {
  for (const bool prefetched : {false, true}) {
    SCOPED_TRACE(prefetched ? "prefetched" : "inline");
    Dataset<Tensor> ds = failing_at(3, UserFault{42});
    if (prefetched) ds = ds.prefetch(2);
    data::Iterator<Tensor> it = ds.make_iterator();
    for (std::int64_t i = 0; i < 3; ++i) EXPECT_EQ(it.get_next().item<std::int64_t>(), i);
    testing::expect_thrown_every_time<UserFault>(
        3, [&] { (void)it.get_next_as_optional(); }, [](const UserFault& fault) { EXPECT_EQ(fault.code, 42); });
  }
}

TEST(Dataset, AMapFnExceptionReachesTheLoopStepOfItsElement) {
  const auto ds = data::range(6).map([](const Tensor& t) {
    if (t.item<std::int64_t>() == 4) throw std::length_error("bad element 4");
    return t;
  });
  std::vector<std::int64_t> before;
  try {
    for (const Tensor& t : ds.batch(2).prefetch(1)) before.push_back(t.to_vector<std::int64_t>()[0]);
    ADD_FAILURE() << "expected std::length_error";
  } catch (const std::length_error& e) {
    EXPECT_STREQ(e.what(), "bad element 4");
  }
  EXPECT_EQ(before, (std::vector<std::int64_t>{0, 2}));
}

TEST(Dataset, PrefetchGivesTheSameElements) {
  EXPECT_EQ(scalars<std::int64_t>(data::range(100).prefetch(1)), iota(0, 100));
  EXPECT_EQ(values<std::int64_t>(data::range(10).batch(4).prefetch(3)),
            (std::vector<std::vector<std::int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(scalars<std::int64_t>(data::range(3).prefetch(2).repeat(2)), (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2}));
}

TEST(Dataset, PrefetchRunsAheadAndStopsWhenTheIterationIsDropped) {
  Watchdog watchdog(kHangLimit, "dropping a prefetching iterator");
  std::atomic<std::int64_t> made{0};
  const auto endless = Dataset<Tensor>::from_generator([&made] {
    return std::function<std::optional<Tensor>()>([&made] { return std::optional<Tensor>(Tensor::scalar(made++)); });
  });
  {
    data::Iterator<Tensor> it = endless.prefetch(3).make_iterator();
    EXPECT_EQ(it.get_next().item<std::int64_t>(), 0);
    // Without a consumer the thread fills its 3 slots (elements 1..3) and waits for room there.
    while (made.load() < 4) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(made.load(), 4);
  }
  const std::int64_t at_drop = made.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(made.load(), at_drop);  // joined: nothing runs the generator any more
}

TEST(Dataset, DroppingAnIterationWhileItsGeneratorRunsWaitsForIt) {
  Watchdog watchdog(kHangLimit, "dropping an iterator during a slow generator");
  std::atomic<int> running{0};
  std::atomic<int> finished{0};
  const auto slow = Dataset<Tensor>::from_generator([&] {
    return std::function<std::optional<Tensor>()>([&]() -> std::optional<Tensor> {
      ++running;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ++finished;
      return Tensor::scalar(1.0f);
    });
  });
  {
    data::Iterator<Tensor> it = slow.prefetch(1).make_iterator();
    while (running.load() == 0) std::this_thread::yield();
  }
  EXPECT_EQ(finished.load(), running.load());
}

TEST(Dataset, BatchRejectsElementsThatDoNotStack) {
  const auto make = [](std::vector<Tensor> elements) {
    return Dataset<Tensor>::from_generator([elements] {
      return std::function<std::optional<Tensor>()>([elements, i = std::size_t{0}]() mutable -> std::optional<Tensor> {
        if (i == elements.size()) return std::nullopt;
        return elements[i++];
      });
    });
  };
  // The first batch is fine and comes out; the second fails at its element 1.
  data::Iterator<Tensor> shapes = make({Tensor::from_vector<float>({1, 2}), Tensor::from_vector<float>({3, 4}),
                                        Tensor::from_vector<float>({5, 6}), Tensor::from_vector<float>({7, 8, 9})})
                                      .batch(2)
                                      .make_iterator();
  EXPECT_EQ(shapes.get_next().shape(), (Shape{2, 2}));
  const std::string what = expect_error<InvalidArgumentError>(
      [&] { (void)shapes.get_next(); },
      {"Dataset::batch: element 1 of a batch has leaf 0 of float32 shape (3,) but element 0 has float32 shape (2,)",
       "every element of a batch needs the same dtype and shape in each leaf"});
  expect_error<InvalidArgumentError>([&] { (void)shapes.get_next(); }, {what});

  data::Iterator<Tensor> dtypes =
      make({Tensor::scalar<float>(1), Tensor::scalar<std::int32_t>(2)}).batch(2).make_iterator();
  expect_error<InvalidArgumentError>(
      [&] { (void)dtypes.get_next(); },
      {"element 1 of a batch has leaf 0 of int32 shape () but element 0 has float32 shape ()"});

  data::Iterator<Tensor> undefined = make({Tensor::scalar<float>(1), Tensor()}).batch(2).make_iterator();
  expect_error<InvalidArgumentError>([&] { (void)undefined.get_next(); },
                                     {"Dataset::batch: leaf 0 of element 1 of a batch is an undefined Tensor"});
}

TEST(Dataset, BatchRejectsElementsOfAnotherStructure) {
  using List = std::vector<Tensor>;
  const auto lists = Dataset<List>::from_generator([] {
    return std::function<std::optional<List>()>([i = 0]() mutable -> std::optional<List> {
      if (i == 2) return std::nullopt;
      return List(static_cast<std::size_t>(++i), Tensor::scalar(1.0f));
    });
  });
  data::Iterator<List> it = lists.batch(2).make_iterator();
  expect_error<InvalidArgumentError>([&] { (void)it.get_next(); },
                                     {"Dataset::batch: element 1 of a batch has structure list[Tensor, Tensor] but "
                                      "element 0 has list[Tensor]",
                                      "every element of a batch needs the same structure"});
}

TEST(Dataset, ArgumentErrors) {
  const Dataset<Tensor> ds = data::range(4);
  expect_error<InvalidArgumentError>([&] { (void)ds.batch(0); }, {"Dataset::batch: batch_size is 0; it must be >= 1"});
  expect_error<InvalidArgumentError>([&] { (void)ds.shuffle(0, 1); },
                                     {"Dataset::shuffle: buffer_size is 0; it must be >= 1"});
  expect_error<InvalidArgumentError>([&] { (void)ds.prefetch(-3); },
                                     {"Dataset::prefetch: buffer_size is -3; it must be >= 1"});
  expect_error<InvalidArgumentError>([&] { (void)ds.shard(0, 0); },
                                     {"Dataset::shard: num_shards is 0; it must be >= 1"});
  expect_error<InvalidArgumentError>([&] { (void)ds.shard(2, 2); },
                                     {"Dataset::shard: index 2 is not in [0, 2) for num_shards 2"});
  expect_error<InvalidArgumentError>([&] { (void)ds.shard(2, -1); }, {"index -1 is not in [0, 2)"});
  expect_error<InvalidArgumentError>([&] { (void)ds.take(-2); },
                                     {"Dataset::take: count is -2; it must be >= 0, or -1 for every element"});
  expect_error<InvalidArgumentError>([&] { (void)ds.skip(-5); },
                                     {"Dataset::skip: count is -5; it must be >= 0, or -1 to skip every element"});
  expect_error<InvalidArgumentError>([&] { (void)ds.repeat(-2); },
                                     {"Dataset::repeat: count is -2; it must be >= 0, or -1 to repeat forever"});
  expect_error<InvalidArgumentError>([] { (void)data::range(0, 5, 0); }, {"data::range: step is 0; it must not be 0"});
}

TEST(Dataset, FromTensorSlicesErrors) {
  using Pair = std::pair<Tensor, Tensor>;
  expect_error<InvalidArgumentError>(
      [] {
        (void)Dataset<Pair>::from_tensor_slices(
            {Tensor::from_vector<float>({1, 2, 3, 4}), Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2})});
      },
      {"Dataset::from_tensor_slices: leaf 1 has 3 rows (shape (3, 2)) but leaf 0 has 4 (shape (4,))",
       "every leaf needs the same size in dimension 0"});
  expect_error<InvalidArgumentError>(
      [] { (void)Dataset<Tensor>::from_tensor_slices(Tensor::scalar(1.0f)); },
      {"Dataset::from_tensor_slices: leaf 0 has shape () (a scalar); every leaf needs a dimension 0 to slice"});
  expect_error<InvalidArgumentError>(
      [] { (void)Dataset<Pair>::from_tensor_slices({Tensor::from_vector<float>({1}), Tensor()}); },
      {"Dataset::from_tensor_slices: leaf 1 is an undefined Tensor (default-constructed)"});
  expect_error<InvalidArgumentError>(
      [] { (void)Dataset<std::vector<Tensor>>::from_tensor_slices({}); },
      {"Dataset::from_tensor_slices: tensors holds no Tensor (list[]); it needs at least one to slice"});
}

TEST(Dataset, FromGeneratorErrors) {
  expect_error<InvalidArgumentError>(
      [] { (void)Dataset<Tensor>::from_generator(nullptr); },
      {"Dataset::from_generator: make_next is empty; make_next must return a new generator for each pass"});
  const auto empty = Dataset<Tensor>::from_generator([] { return std::function<std::optional<Tensor>()>(); });
  expect_error<InvalidArgumentError>([&] { (void)empty.make_iterator(); },
                                     {"Dataset::from_generator: make_next returned an empty function"});
}

}  // namespace
}  // namespace distribute
