// Distributed input: the examples with their exact per-replica batches for 2, 3 and 4
// replicas (experimental_distribute_dataset and distribute_datasets_from_function), the default
// and one-device strategies, views instead of copies, batches fed to run, the rule against
// iterating inside a replica, user exceptions, the prefetch thread (ahead of the consumer, its
// shutdown), and the errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using data::Dataset;
using testing::cpu_devices;
using testing::expect_error;
using testing::Watchdog;

constexpr std::chrono::milliseconds kHangLimit{20000};

// step -> replica -> the values of that replica's batch.
template <class E>
using Steps = std::vector<std::vector<std::vector<E>>>;

// Every step of one iteration. Each batch must be rank 1 of dtype E.
template <class E>
Steps<E> steps(const DistributedDataset<Tensor>& ds) {
  Steps<E> out;
  for (const PerReplica<Tensor>& batch : ds) {
    out.emplace_back();
    for (const Tensor& t : batch.values()) {
      EXPECT_EQ(t.dtype(), dtype_v<E>);
      EXPECT_EQ(t.rank(), 1);
      out.back().push_back(t.to_vector<E>());
    }
  }
  return out;
}

Dataset<Tensor> five_to_eight() {
  return Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>({5, 6, 7, 8}));
}

// Scalars 0, 1, ... up to `stop`, throwing `error` in place of element fail_at.
template <class E>
Dataset<Tensor> failing_range(std::int64_t stop, std::int64_t fail_at, E error) {
  return Dataset<Tensor>::from_generator([stop, fail_at, error] {
    return std::function<std::optional<Tensor>()>([=, i = std::int64_t{0}]() mutable -> std::optional<Tensor> {
      if (i == stop) return std::nullopt;
      if (i == fail_at) throw error;
      return Tensor::scalar<std::int64_t>(i++);
    });
  });
}

struct UserFault {
  int code;
};

// The tensor [1, 2, 3, 4] forever, counting in `made` the elements made.
Dataset<Tensor> endless_counting(std::atomic<int>& made) {
  return Dataset<Tensor>::from_generator([&made] {
    return std::function<std::optional<Tensor>()>([&made]() -> std::optional<Tensor> {
      ++made;
      return Tensor::from_vector<float>({1, 2, 3, 4});
    });
  });
}

class DistributedInput : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Replicas, DistributedInput, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "replicas"; });

// from_tensor_slices([5, 6, 7, 8]).batch(2): the seeds' DistributedValues example.
TEST_P(DistributedInput, FiveSixSevenEightBatchedByTwo) {
  const std::map<int, Steps<float>> expected = {
      {2, {{{5}, {6}}, {{7}, {8}}}},
      {3, {{{5}, {6}, {}}, {{7}, {8}, {}}}},
      {4, {{{5}, {6}, {}, {}}, {{7}, {8}, {}, {}}}},
  };
  MirroredStrategy strategy(cpu_devices(n()));
  EXPECT_EQ(steps<float>(strategy.experimental_distribute_dataset(five_to_eight().batch(2))), expected.at(n()));
}

// range(100).batch(10): step k holds 10k .. 10k + 9, cut in replica order.
TEST_P(DistributedInput, RangeOfHundredBatchedByTen) {
  const std::map<int, std::vector<std::pair<int, int>>> rows = {
      {2, {{0, 5}, {5, 10}}},
      {3, {{0, 4}, {4, 7}, {7, 10}}},
      {4, {{0, 3}, {3, 6}, {6, 8}, {8, 10}}},
  };
  Steps<std::int64_t> expected;
  for (std::int64_t k = 0; k < 10; ++k) {
    expected.emplace_back();
    for (const auto& [begin, end] : rows.at(n())) {
      expected.back().emplace_back();
      for (int i = begin; i < end; ++i) expected.back().back().push_back(10 * k + i);
    }
  }
  MirroredStrategy strategy(cpu_devices(n()));
  EXPECT_EQ(steps<std::int64_t>(strategy.experimental_distribute_dataset(data::range(100).batch(10))), expected);
}

// from_tensor_slices([5, 6, 7]).batch(4): one partial batch, filled in replica order.
TEST_P(DistributedInput, PartialBatchIsFilledInReplicaOrder) {
  const std::map<int, Steps<float>> expected = {
      {2, {{{5, 6}, {7}}}},
      {3, {{{5, 6}, {7}, {}}}},
      {4, {{{5}, {6}, {7}, {}}}},
  };
  MirroredStrategy strategy(cpu_devices(n()));
  const auto ds = Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>({5, 6, 7})).batch(4);
  EXPECT_EQ(steps<float>(strategy.experimental_distribute_dataset(ds)), expected.at(n()));
}

// from_tensor_slices([5]).batch(2): [5], then empty batches.
TEST_P(DistributedInput, SingleElementThenEmptyBatches) {
  const std::map<int, Steps<float>> expected = {
      {2, {{{5}, {}}}},
      {3, {{{5}, {}, {}}}},
      {4, {{{5}, {}, {}, {}}}},
  };
  MirroredStrategy strategy(cpu_devices(n()));
  const auto ds = Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>({5})).batch(2);
  EXPECT_EQ(steps<float>(strategy.experimental_distribute_dataset(ds)), expected.at(n()));
}

// distribute_datasets_from_function with range(9).batch(2): consecutive elements per replica.
TEST_P(DistributedInput, FromFunctionGivesConsecutiveElements) {
  const std::map<int, Steps<std::int64_t>> expected = {
      {2, {{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}, {{8}, {}}}},
      {3, {{{0, 1}, {2, 3}, {4, 5}}, {{6, 7}, {8}, {}}}},
      {4, {{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {{8}, {}, {}, {}}}},
  };
  MirroredStrategy strategy(cpu_devices(n()));
  std::vector<std::string> contexts;
  const auto ds = strategy.distribute_datasets_from_function([&](const InputContext& ctx) {
    contexts.push_back(absl::StrCat(ctx.num_input_pipelines(), " ", ctx.input_pipeline_id(), " ",
                                    ctx.num_replicas_in_sync()));
    return data::range(9).batch(2);
  });
  EXPECT_EQ(contexts, std::vector<std::string>{absl::StrCat("1 0 ", n())});
  EXPECT_EQ(steps<std::int64_t>(ds), expected.at(n()));
  EXPECT_EQ(steps<std::int64_t>(ds), expected.at(n()));  // re-iterable; dataset_fn is not called again
  EXPECT_EQ(contexts.size(), 1u);
}

// With drop_remainder the last, partial step is dropped as well.
TEST_P(DistributedInput, FromFunctionWithDropRemainderDropsThePartialStep) {
  const std::map<int, Steps<std::int64_t>> expected = {
      {2, {{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}}},
      {3, {{{0, 1}, {2, 3}, {4, 5}}}},
      {4, {{{0, 1}, {2, 3}, {4, 5}, {6, 7}}}},
  };
  MirroredStrategy strategy(cpu_devices(n()));
  const auto ds = strategy.distribute_datasets_from_function(
      [](const InputContext&) { return data::range(9).batch(2, /*drop_remainder=*/true); });
  EXPECT_EQ(steps<std::int64_t>(ds), expected.at(n()));
}

TEST_P(DistributedInput, EmptyBatchesKeepTheTrailingShapeAndDtype) {
  MirroredStrategy strategy(cpu_devices(n()));
  const Tensor rows = Tensor::from_vector<std::int32_t>({1, 2, 3}, Shape{1, 3});
  const auto ds = Dataset<Tensor>::from_tensor_slices(rows).batch(2);
  const PerReplica<Tensor> batch = strategy.experimental_distribute_dataset(ds).make_iterator().get_next();
  EXPECT_EQ(batch[0].shape(), (Shape{1, 3}));
  for (int r = 1; r < n(); ++r) {
    EXPECT_EQ(batch[r].shape(), (Shape{0, 3}));
    EXPECT_EQ(batch[r].dtype(), DType::kInt32);
  }
  const auto from_function =
      strategy.distribute_datasets_from_function([&](const InputContext&) { return Dataset<Tensor>::from_tensor_slices(rows).batch(2); });
  const PerReplica<Tensor> first = from_function.make_iterator().get_next();
  for (int r = 1; r < n(); ++r) EXPECT_EQ(first[r].shape(), (Shape{0, 3}));
}

TEST_P(DistributedInput, SplittingMakesViewsOfTheGlobalBatch) {
  MirroredStrategy strategy(cpu_devices(n()));
  const PerReplica<Tensor> batch =
      strategy.experimental_distribute_dataset(data::range(12).batch(12)).make_iterator().get_next();
  for (int r = 1; r < n(); ++r) EXPECT_TRUE(batch[r].same_storage(batch[0]));
  // CPU replicas share host memory: the batches stay where the dataset made them.
  for (const Tensor& t : batch.values()) EXPECT_TRUE(t.device().is_cpu());
}

// With fetch_to_device (the default) each CPU replica's part reports its replica's device; it
// used to report CPU:0, where the dataset made the batch. It is still a view of that batch, and
// collectives take a CPU tensor on any CPU replica.
TEST_P(DistributedInput, CpuReplicasPartsReportTheirReplicasDevice) {
  MirroredStrategy strategy(cpu_devices(n()));
  const auto expect_replica_devices = [&](const PerReplica<Tensor>& batch) {
    for (int r = 0; r < n(); ++r) EXPECT_EQ(batch[r].device(), Device::cpu(r)) << "replica " << r;
  };
  const PerReplica<Tensor> split =
      strategy.experimental_distribute_dataset(data::range(12).batch(12)).make_iterator().get_next();
  expect_replica_devices(split);
  for (int r = 1; r < n(); ++r) {
    EXPECT_TRUE(split[r].same_storage(split[0]));
    EXPECT_EQ(split[r].raw_data(), static_cast<const std::int64_t*>(split[0].raw_data()) + r * (12 / n()));
  }
  // Consecutive elements, the last step's empty batches, and one pipeline per replica.
  for (const auto& batch : strategy.distribute_datasets_from_function(
           [](const InputContext&) { return data::range(3).batch(2); })) {
    expect_replica_devices(batch);
  }
  InputOptions per_replica;
  per_replica.experimental_replication_mode = InputReplicationMode::kPerReplica;
  for (const auto& batch : strategy.distribute_datasets_from_function(
           [](const InputContext&) { return data::range(2).batch(2); }, per_replica)) {
    expect_replica_devices(batch);
  }
  // Each replica all-reduces its own part, then another replica's: both are host memory.
  const std::int64_t rows = 12 / n();
  std::vector<std::int64_t> column_sums(static_cast<std::size_t>(rows), 0);
  for (int r = 0; r < n(); ++r) {
    for (std::int64_t k = 0; k < rows; ++k) column_sums[static_cast<std::size_t>(k)] += r * rows + k;
  }
  const auto sums = strategy.run(
      [&](const Tensor& mine) {
        ReplicaContext& ctx = *get_replica_context();
        EXPECT_EQ(mine.device(), ctx.device());
        const Tensor own = ctx.all_reduce(ReduceOp::kSum, mine);
        const Tensor& other = split[(ctx.replica_id_in_sync_group() + 1) % n()];
        return std::make_pair(own, ctx.all_reduce(ReduceOp::kSum, other));
      },
      split);
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(sums[r].first.to_vector<std::int64_t>(), column_sums);
    EXPECT_EQ(sums[r].second.to_vector<std::int64_t>(), column_sums);
  }
  std::vector<std::int64_t> all(12);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(strategy.gather(split, 0).to_vector<std::int64_t>(), all);
  // Without fetch_to_device the parts stay where the dataset made them.
  InputOptions stay;
  stay.experimental_fetch_to_device = false;
  const PerReplica<Tensor> kept =
      strategy.experimental_distribute_dataset(data::range(12).batch(12), stay).make_iterator().get_next();
  for (const Tensor& t : kept.values()) EXPECT_EQ(t.device(), Device::cpu(0));
}

TEST_P(DistributedInput, NestedElementsAreSplitLeafByLeaf) {
  using Pair = std::pair<Tensor, Tensor>;
  MirroredStrategy strategy(cpu_devices(n()));
  const Pair source{Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, Shape{4, 2}),
                    Tensor::from_vector<std::int32_t>({10, 11, 12, 13})};
  std::vector<std::int32_t> labels;
  std::vector<float> images;
  for (const PerReplica<Pair>& batch : strategy.experimental_distribute_dataset(Dataset<Pair>::from_tensor_slices(source).batch(4))) {
    for (const Pair& p : batch.values()) {
      ASSERT_EQ(p.first.shape()[0], p.second.shape()[0]);
      EXPECT_EQ(p.first.shape()[1], 2);
      for (std::int32_t v : p.second.to_vector<std::int32_t>()) labels.push_back(v);
      for (float v : p.first.to_vector<float>()) images.push_back(v);
    }
  }
  EXPECT_EQ(labels, (std::vector<std::int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(images, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST_P(DistributedInput, ElementsWithoutBatchAreSplitByTheirOwnSize) {
  MirroredStrategy strategy(cpu_devices(n()));
  const auto ds = Dataset<Tensor>::from_generator([] {
    return std::function<std::optional<Tensor>()>([i = 0]() mutable -> std::optional<Tensor> {
      if (i++ == 1) return std::nullopt;
      return Tensor::from_vector<float>({0, 1, 2, 3, 4});
    });
  });
  const std::map<int, Steps<float>> expected = {
      {2, {{{0, 1, 2}, {3, 4}}}},
      {3, {{{0, 1}, {2, 3}, {4}}}},
      {4, {{{0, 1}, {2}, {3}, {4}}}},
  };
  EXPECT_EQ(steps<float>(strategy.experimental_distribute_dataset(ds)), expected.at(n()));
}

TEST_P(DistributedInput, ShuffledBatchesCoverEveryElementOnce) {
  MirroredStrategy strategy(cpu_devices(n()));
  std::multiset<std::int64_t> seen;
  for (const PerReplica<Tensor>& batch :
       strategy.experimental_distribute_dataset(data::range(103).shuffle(103, 5).batch(8))) {
    for (const Tensor& t : batch.values()) {
      for (std::int64_t v : t.to_vector<std::int64_t>()) seen.insert(v);
    }
  }
  std::multiset<std::int64_t> all;
  for (std::int64_t i = 0; i < 103; ++i) all.insert(i);
  EXPECT_EQ(seen, all);
}

// The README idiom: every step's batch goes to run; the replicas see their own part.
TEST_P(DistributedInput, BatchesFeedRun) {
  MirroredStrategy strategy(cpu_devices(n()));
  double total = 0;
  int steps_run = 0;
  for (auto batch : strategy.experimental_distribute_dataset(data::range(40).batch(8))) {
    auto sums = strategy.run([](const Tensor& local) {
      const auto sum = static_cast<double>(local.flat<std::int64_t>().sum());
      return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::scalar(sum));
    }, batch);
    total += sums[0].item<double>();
    ++steps_run;
  }
  EXPECT_EQ(steps_run, 5);
  EXPECT_EQ(total, 780.0);  // 0 + 1 + ... + 39
}

TEST_P(DistributedInput, IteratingInsideAReplicaIsAFailedPrecondition) {
  MirroredStrategy strategy(cpu_devices(n()));
  const auto ds = strategy.experimental_distribute_dataset(five_to_eight().batch(2));
  DistributedIterator<Tensor> it = ds.make_iterator();
  const std::vector<std::string> words = {
      "a distributed dataset cannot be iterated inside a replica's function",
      "iterate it in the caller's loop and pass each PerReplica batch to Strategy::run"};
  strategy.run([&] {
    expect_error<FailedPreconditionError>([&] { (void)it.get_next(); }, words);
    expect_error<FailedPreconditionError>([&] { (void)it.get_next_as_optional(); }, {"DistributedIterator::get_next"});
    expect_error<FailedPreconditionError>([&] { (void)ds.make_iterator(); }, {"DistributedDataset::make_iterator"});
    expect_error<FailedPreconditionError>([&] { (void)ds.begin(); }, {"DistributedDataset::make_iterator"});
  });
  // Nothing was taken: the caller still gets the first step.
  EXPECT_EQ(it.get_next()[0].to_vector<float>(), std::vector<float>{5});
}

// Distributing is refused at the call inside a replica, not at the first iteration of the result.
TEST_P(DistributedInput, DistributingInsideAReplicaIsAFailedPrecondition) {
  MirroredStrategy strategy(cpu_devices(n()));
  std::atomic<int> dataset_fn_calls{0};
  strategy.run([&] {
    expect_error<FailedPreconditionError>(
        [&] { (void)strategy.experimental_distribute_dataset(five_to_eight().batch(2)); },
        {"experimental_distribute_dataset requires being in cross-replica context",
         "distribute the dataset outside Strategy::run"});
    expect_error<FailedPreconditionError>(
        [&] {
          (void)strategy.distribute_datasets_from_function([&](const InputContext&) {
            ++dataset_fn_calls;
            return five_to_eight();
          });
        },
        {"distribute_datasets_from_function requires being in cross-replica context",
         "distribute the dataset outside Strategy::run"});
  });
  EXPECT_EQ(dataset_fn_calls.load(), 0) << "dataset_fn must not run when the call is refused";
  // In the strategy's scope (cross-replica context) both are allowed.
  const StrategyScope scope = strategy.scope();
  EXPECT_EQ(steps<float>(strategy.experimental_distribute_dataset(five_to_eight().batch(4))).size(), 1u);
  EXPECT_EQ(strategy.distribute_datasets_from_function([](const InputContext&) { return five_to_eight(); })
                .num_replicas_in_sync(),
            n());
}

TEST_P(DistributedInput, AUserExceptionReachesItsStepWithItsTypeAndStays) {
  Watchdog watchdog(kHangLimit, "a failing distributed dataset");
  MirroredStrategy strategy(cpu_devices(n()));
  // Batches of 2: steps 0 and 1 are whole, the element that would start step 2 throws.
  DistributedIterator<Tensor> it =
      strategy.experimental_distribute_dataset(failing_range(10, 4, UserFault{7}).batch(2)).make_iterator();
  EXPECT_EQ(it.get_next()[0].to_vector<std::int64_t>(), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(it.get_next()[0].to_vector<std::int64_t>(), (std::vector<std::int64_t>{2}));
  testing::expect_thrown_every_time<UserFault>(
      3, [&] { (void)it.get_next(); }, [](const UserFault& fault) { EXPECT_EQ(fault.code, 7); });
  // A map fn's exception in a loop, through distribute_datasets_from_function.
  const auto mapped = strategy.distribute_datasets_from_function([](const InputContext&) {
    return data::range(20).map([](const Tensor& t) {
      if (t.item<std::int64_t>() == 2 * 4 + 1) throw std::domain_error("element 9");
      return t.reshape(Shape{1});
    });
  });
  int completed = 0;
  try {
    for (auto batch : mapped) {
      (void)batch;
      ++completed;
    }
    ADD_FAILURE() << "expected std::domain_error";
  } catch (const std::domain_error& e) {
    EXPECT_STREQ(e.what(), "element 9");
  }
  EXPECT_EQ(completed, 9 / n());
}

TEST_P(DistributedInput, TheThreadPreparesStepsAheadOfTheConsumer) {
  Watchdog watchdog(kHangLimit, "prefetching steps");
  MirroredStrategy strategy(cpu_devices(n()));
  std::atomic<int> made{0};
  const auto counted = endless_counting(made);
  InputOptions options;
  options.experimental_per_replica_buffer_size = 3;
  DistributedIterator<Tensor> it = strategy.experimental_distribute_dataset(counted, options).make_iterator();
  // One element per step: the thread makes 3 steps without being asked, then waits for room.
  while (made.load() < 3) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(made.load(), 3);
  (void)it.get_next();
  while (made.load() < 4) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(made.load(), 4);
}

TEST_P(DistributedInput, DroppingTheIteratorMidEpochStopsItsThread) {
  Watchdog watchdog(kHangLimit, "dropping a distributed iterator");
  MirroredStrategy strategy(cpu_devices(n()));
  std::atomic<int> made{0};
  int seen = 0;
  for (auto batch : strategy.experimental_distribute_dataset(endless_counting(made).batch(2).prefetch(2))) {
    (void)batch;
    if (++seen == 3) break;  // the loop's iterator goes here, its thread waiting for room
  }
  const int at_drop = made.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(made.load(), at_drop);
  EXPECT_EQ(seen, 3);
}

// ---------------------------------------------------------------------------------------------
// InputReplicationMode::kPerReplica: one input pipeline per replica.

class PerReplicaInput : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
  static InputOptions per_replica() {
    InputOptions options;
    options.experimental_replication_mode = InputReplicationMode::kPerReplica;
    return options;
  }
};

INSTANTIATE_TEST_SUITE_P(Replicas, PerReplicaInput, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "replicas"; });

// range(12) sharded by input pipeline, batches of 2: replica r reads r, r + N, r + 2N, ...
TEST_P(PerReplicaInput, DatasetFnIsCalledOncePerReplicaWithItsPipelineId) {
  const std::map<int, Steps<std::int64_t>> expected = {
      {1, {{{0, 1}}, {{2, 3}}, {{4, 5}}, {{6, 7}}, {{8, 9}}, {{10, 11}}}},
      {2, {{{0, 2}, {1, 3}}, {{4, 6}, {5, 7}}, {{8, 10}, {9, 11}}}},
      {3, {{{0, 3}, {1, 4}, {2, 5}}, {{6, 9}, {7, 10}, {8, 11}}}},
  };
  MirroredStrategy strategy(cpu_devices(n()));
  std::vector<std::string> contexts;
  const auto ds = strategy.distribute_datasets_from_function(
      [&](const InputContext& ctx) {
        contexts.push_back(absl::StrCat(ctx.num_input_pipelines(), " ", ctx.input_pipeline_id(), " ",
                                        ctx.num_replicas_in_sync()));
        return data::range(12).shard(ctx.num_input_pipelines(), ctx.input_pipeline_id()).batch(2);
      },
      per_replica());
  std::vector<std::string> expected_contexts;
  for (int r = 0; r < n(); ++r) expected_contexts.push_back(absl::StrCat(n(), " ", r, " ", n()));
  EXPECT_EQ(contexts, expected_contexts);
  EXPECT_EQ(steps<std::int64_t>(ds), expected.at(n()));
  EXPECT_EQ(steps<std::int64_t>(ds), expected.at(n()));  // re-iterable; dataset_fn is not called again
  EXPECT_EQ(contexts.size(), static_cast<std::size_t>(n()));
}

// Replica r's dataset has r + 1 elements: a replica whose data ran out gets empty batches until
// every dataset has ended; with drop_remainder those partial steps are dropped.
TEST_P(PerReplicaInput, ReplicasWhoseDataRanOutGetEmptyBatches) {
  const std::map<int, Steps<std::int64_t>> expected = {
      {1, {{{0}}}},
      {2, {{{0}, {10}}, {{}, {11}}}},
      {3, {{{0}, {10}, {20}}, {{}, {11}, {21}}, {{}, {}, {22}}}},
  };
  MirroredStrategy strategy(cpu_devices(n()));
  auto make = [&](bool drop_remainder) {
    return strategy.distribute_datasets_from_function(
        [drop_remainder](const InputContext& ctx) {
          const int id = ctx.input_pipeline_id();
          return data::range(10 * id, 10 * id + id + 1).batch(1, drop_remainder);
        },
        per_replica());
  };
  EXPECT_EQ(steps<std::int64_t>(make(false)), expected.at(n()));
  const Steps<std::int64_t> whole_steps = {expected.at(n())[0]};
  EXPECT_EQ(steps<std::int64_t>(make(true)), whole_steps);
}

TEST_P(PerReplicaInput, BatchesFeedRun) {
  MirroredStrategy strategy(cpu_devices(n()));
  const auto ds = strategy.distribute_datasets_from_function(
      [](const InputContext& ctx) {
        return data::range(40).shard(ctx.num_input_pipelines(), ctx.input_pipeline_id()).batch(4);
      },
      per_replica());
  double total = 0;
  for (auto batch : ds) {
    auto sums = strategy.run([](const Tensor& local) {
      const auto sum = static_cast<double>(local.flat<std::int64_t>().sum());
      return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::scalar(sum));
    }, batch);
    total += sums[0].item<double>();
  }
  EXPECT_EQ(total, 780.0);  // 0 + 1 + ... + 39, each element read by one replica once
}

// On worker 1 of 2 with 2 local replicas, the replicas' pipelines are 2 and 3 of 4.
TEST(PerReplicaInputWorkers, PipelineIdsAreGlobalReplicaIds) {
  InputOptions options;
  options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  std::vector<std::string> contexts;
  const auto ds = DistributedDataset<Tensor>::from_function(
      {Device::cpu(0), Device::cpu(1)},
      [&](const InputContext& ctx) {
        contexts.push_back(absl::StrCat(ctx.num_input_pipelines(), " ", ctx.input_pipeline_id(), " ",
                                        ctx.num_replicas_in_sync()));
        return data::range(8).shard(ctx.num_input_pipelines(), ctx.input_pipeline_id()).batch(2);
      },
      options, InputContext(2, 1, 4));
  EXPECT_EQ(contexts, (std::vector<std::string>{"4 2 4", "4 3 4"}));
  EXPECT_EQ(steps<std::int64_t>(ds), (Steps<std::int64_t>{{{2, 6}, {3, 7}}}));
}

// experimental_place_dataset_on_device: dataset_fn makes its tensors on its replica's device.
TEST(PerReplicaInputPlacement, PlaceDatasetOnDeviceMakesTheReplicasTensorsThere) {
  MirroredStrategy strategy(cpu_devices(3));
  InputOptions options;
  options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  options.experimental_fetch_to_device = false;
  options.experimental_place_dataset_on_device = true;
  std::vector<Device> made_on;
  const auto ds = strategy.distribute_datasets_from_function(
      [&](const InputContext& ctx) {
        const Tensor rows = Tensor::from_vector<float>({float(ctx.input_pipeline_id()), 9.0f});
        made_on.push_back(rows.device());
        return Dataset<Tensor>::from_tensor_slices(rows).batch(2);
      },
      options);
  EXPECT_EQ(made_on, (std::vector<Device>{Device::cpu(0), Device::cpu(1), Device::cpu(2)}));
  EXPECT_EQ(default_device(), Device::cpu(0)) << "the caller's default device is back";
  EXPECT_EQ(steps<float>(ds), (Steps<float>{{{0, 9}, {1, 9}, {2, 9}}}));
  // Without it, dataset_fn makes them where the caller would.
  made_on.clear();
  options.experimental_place_dataset_on_device = false;
  (void)strategy.distribute_datasets_from_function(
      [&](const InputContext&) {
        made_on.push_back(Tensor::scalar(1.0f).device());
        return data::range(2).batch(1);
      },
      options);
  EXPECT_EQ(made_on, (std::vector<Device>(3, Device::cpu(0))));
}

TEST(PerReplicaInputErrors, OptionsTensorFlowRefuses) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  InputOptions per_replica;
  per_replica.experimental_replication_mode = InputReplicationMode::kPerReplica;
  expect_error<UnimplementedError>(
      [&] { (void)strategy.experimental_distribute_dataset(five_to_eight().batch(2), per_replica); },
      {"experimental_distribute_dataset: InputReplicationMode::kPerReplica is only supported by "
       "distribute_datasets_from_function"});
  int calls = 0;
  const auto dataset_fn = [&](const InputContext&) {
    ++calls;
    return five_to_eight().batch(2);
  };
  InputOptions placed_per_worker;
  placed_per_worker.experimental_fetch_to_device = false;
  placed_per_worker.experimental_place_dataset_on_device = true;
  const std::vector<std::string> needs_per_replica = {
      "InputOptions: experimental_place_dataset_on_device places each replica's own input pipeline on its device",
      "it needs experimental_replication_mode = InputReplicationMode::kPerReplica"};
  expect_error<InvalidArgumentError>(
      [&] { (void)strategy.distribute_datasets_from_function(dataset_fn, placed_per_worker); }, needs_per_replica);
  expect_error<InvalidArgumentError>(
      [&] { (void)strategy.experimental_distribute_dataset(five_to_eight().batch(2), placed_per_worker); },
      needs_per_replica);
  InputOptions placed_and_fetched = per_replica;
  placed_and_fetched.experimental_place_dataset_on_device = true;
  expect_error<InvalidArgumentError>(
      [&] { (void)strategy.distribute_datasets_from_function(dataset_fn, placed_and_fetched); },
      {"InputOptions: experimental_place_dataset_on_device and experimental_fetch_to_device are both set",
       "set experimental_fetch_to_device = false"});
  EXPECT_EQ(calls, 0) << "dataset_fn must not run when the options are refused";
}

TEST(DistributedInputOneReplica, DefaultStrategyKeepsTheDatasetAsItIs) {
  Strategy& strategy = get_strategy();
  EXPECT_EQ(steps<float>(strategy.experimental_distribute_dataset(five_to_eight().batch(2))),
            (Steps<float>{{{5, 6}}, {{7, 8}}}));
  std::optional<std::string> context;
  const auto ds = strategy.distribute_datasets_from_function([&](const InputContext& ctx) {
    std::ostringstream os;
    os << ctx << " replicas " << ctx.num_replicas_in_sync();
    context = os.str();
    return five_to_eight().batch(3);
  });
  EXPECT_EQ(context, "InputContext(input pipeline id 0, total: 1) replicas 1");
  EXPECT_EQ(steps<float>(ds), (Steps<float>{{{5, 6, 7}}, {{8}}}));
  // One replica: the element is passed whole, as a view; unbatched scalars pass too.
  const Tensor source = Tensor::from_vector<float>({5, 6, 7, 8});
  PerReplica<Tensor> whole =
      strategy.experimental_distribute_dataset(Dataset<Tensor>::from_tensor_slices(source)).make_iterator().get_next();
  EXPECT_TRUE(whole[0].same_storage(source));
  EXPECT_EQ(whole[0].shape(), Shape{});
}

TEST(DistributedInputOneReplica, OneDeviceStrategyAndRunsOfOneReplica) {
  OneDeviceStrategy one("CPU:0");
  EXPECT_EQ(steps<float>(one.experimental_distribute_dataset(five_to_eight().batch(2))),
            (Steps<float>{{{5, 6}}, {{7, 8}}}));
  // The fn of any run is a replica's, the default strategy's and a OneDeviceStrategy's included;
  // their scopes are not.
  auto ds = get_strategy().experimental_distribute_dataset(five_to_eight().batch(4));
  for (Strategy* strategy : {&get_strategy(), static_cast<Strategy*>(&one)}) {
    strategy->run([&] {
      expect_error<FailedPreconditionError>([&] { (void)ds.make_iterator(); }, {"cannot be iterated inside a replica"});
    });
  }
  StrategyScope scope = one.scope();
  EXPECT_EQ(ds.make_iterator().get_next()[0].to_vector<float>(), (std::vector<float>{5, 6, 7, 8}));
}

// The seeds' DistributedValues page: the first batch as input into run and into reduce.
TEST(DistributedInputSeeds, FirstBatchIntoRunAndReduce) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  DistributedIterator<Tensor> it = strategy.experimental_distribute_dataset(five_to_eight().batch(2)).make_iterator();
  const PerReplica<Tensor> values = it.get_next();
  std::ostringstream printed;
  printed << values;
  EXPECT_EQ(printed.str(),
            "PerReplica:{\n  0: <Tensor: shape=(1,), dtype=float32, numpy=[5.0]>,\n"
            "  1: <Tensor: shape=(1,), dtype=float32, numpy=[6.0]>\n}");
  auto updated = strategy.run([](const Tensor& input) {
    Tensor out = input.clone();
    out.flat<float>() += 1.0f;
    return out;
  }, values);
  EXPECT_EQ(updated[0].to_vector<float>(), std::vector<float>{6});
  EXPECT_EQ(updated[1].to_vector<float>(), std::vector<float>{7});
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, values, 0).item<float>(), 11.0f);
  EXPECT_EQ(strategy.experimental_local_results(values)[1].to_vector<float>(), std::vector<float>{6});
}

TEST(DistributedInputErrors, EndOfSequence) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  DistributedIterator<Tensor> it = strategy.experimental_distribute_dataset(five_to_eight().batch(4)).make_iterator();
  (void)it.get_next();
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  expect_error<OutOfRangeError>([&] { (void)it.get_next(); },
                                {"DistributedIterator::get_next: End of sequence: the data has no more elements"});
}

TEST(DistributedInputErrors, OptionsAndDevices) {
  InputOptions options;
  options.experimental_per_replica_buffer_size = 0;
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  expect_error<InvalidArgumentError>([&] { (void)strategy.experimental_distribute_dataset(five_to_eight(), options); },
                                     {"InputOptions: experimental_per_replica_buffer_size is 0; it must be >= 1"});
  expect_error<InvalidArgumentError>(
      [&] {
        (void)strategy.distribute_datasets_from_function([](const InputContext&) { return five_to_eight(); }, options);
      },
      {"experimental_per_replica_buffer_size is 0"});
  expect_error<InvalidArgumentError>([] { (void)DistributedDataset<Tensor>::from_dataset({}, five_to_eight()); },
                                     {"DistributedDataset: worker_devices is empty; it needs one device per replica"});
}

TEST(DistributedInputErrors, ElementsThatCannotBeSplit) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  expect_error<InvalidArgumentError>(
      [&] { (void)strategy.experimental_distribute_dataset(five_to_eight()).make_iterator().get_next(); },
      {"experimental_distribute_dataset: leaf 0 of an element has shape () (a scalar); splitting it between 2 "
       "replicas needs a dimension 0: batch the dataset"});
  using Pair = std::pair<Tensor, Tensor>;
  const auto uneven = Dataset<Pair>::from_generator([] {
    return std::function<std::optional<Pair>()>([] {
      return std::optional<Pair>(Pair{Tensor::from_vector<float>({1, 2}), Tensor::from_vector<float>({1, 2, 3})});
    });
  });
  expect_error<InvalidArgumentError>(
      [&] { (void)strategy.experimental_distribute_dataset(uneven).make_iterator().get_next(); },
      {"experimental_distribute_dataset: leaf 1 of an element has 3 rows (shape (3,)) but leaf 0 has 2",
       "every leaf of a batch needs the same size in dimension 0"});
  const auto undefined = Dataset<Pair>::from_generator([] {
    return std::function<std::optional<Pair>()>(
        [] { return std::optional<Pair>(Pair{Tensor::from_vector<float>({1, 2}), Tensor()}); });
  });
  expect_error<InvalidArgumentError>(
      [&] { (void)strategy.experimental_distribute_dataset(undefined).make_iterator().get_next(); },
      {"experimental_distribute_dataset: leaf 1 of an element is an undefined Tensor (default-constructed)"});
  // distribute_datasets_from_function: a replica left without a scalar element has no empty batch.
  const auto scalars = strategy.distribute_datasets_from_function([](const InputContext&) { return data::range(3); });
  DistributedIterator<Tensor> it = scalars.make_iterator();
  EXPECT_EQ(it.get_next()[1].item<std::int64_t>(), 1);
  expect_error<InvalidArgumentError>(
      [&] { (void)it.get_next(); },
      {"distribute_datasets_from_function: replica 1 has no element in the last step, and leaf 0 of the step's first "
       "element has shape () (a scalar); an empty batch needs a dimension 0"});
}

}  // namespace
}  // namespace distribute
