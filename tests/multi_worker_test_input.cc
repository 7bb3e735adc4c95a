// Distributed input across workers (multi_worker_test.cc): pipelines ending at different steps on
// different workers, under each input policy, and the errors of such input, alike on every worker.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "multi_worker_test.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::local_devices;
using testing::MultiWorker;
using testing::strategy;

// Uneven input: worker w's pipeline has steps_of(w) steps, 3, and the last worker's 2 (with
// several workers). Every worker's loop runs 3 steps: in step 3 the last worker's replicas get
// empty batches, and an all_reduce of every replica's batch sum inside the step sees the others'.
class UnevenInput : public MultiWorker {
 protected:
  enum class Loop { kRangeFor, kOptional, kGetNext };

  int steps_of(int w) const { return workers() > 1 && w == workers() - 1 ? 2 : 3; }
  // `count` (rows, 3) float32 batches, batch i filled with first + i.
  static data::Dataset<Tensor> batches(std::int64_t count, std::int64_t rows, float first) {
    std::vector<float> values;
    for (std::int64_t i = 0; i < count * rows * 3; ++i) values.push_back(first + static_cast<float>(i / (rows * 3)));
    return data::Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>(values, Shape{count * rows, 3}))
        .batch(rows);
  }

  // Iterates `dataset` to its end and returns the steps. value(w, l, k) is the value filling
  // replica l of worker w's (rows, 3) batch in step k (from 0), nullopt for an empty batch
  // (0 rows, float32, on the replica's device). Each step runs an all_reduce of the replicas'
  // batch sums, which must be every worker's.
  template <class Dataset, class Value>
  int run_to_end(const Dataset& dataset, std::int64_t rows, Value value, Loop loop) {
    const auto check = [&](const PerReplica<Tensor>& batch, int k) {
      float total = 0;
      for (int w = 0; w < workers(); ++w) {
        for (int l = 0; l < local(); ++l) {
          if (std::optional<float> v = value(w, l, k)) total += *v * static_cast<float>(rows * 3);
        }
      }
      for (int l = 0; l < local(); ++l) {
        const std::optional<float> v = value(worker(), l, k);
        EXPECT_EQ(batch[l].dtype(), DType::kFloat32);
        EXPECT_EQ(batch[l].shape(), (Shape{v ? rows : 0, 3})) << "step " << k << " replica " << l;
        EXPECT_EQ(batch[l].device(), s.extended().worker_devices()[static_cast<std::size_t>(l)]);
        if (v) {
          EXPECT_EQ(batch[l].to_vector<float>(), std::vector<float>(static_cast<std::size_t>(rows * 3), *v));
        }
      }
      PerReplica<float> sums = s.run(
          [](const Tensor& b) {
            float sum = 0;
            for (float x : b.to_vector<float>()) sum += x;
            return get_replica_context()->all_reduce(ReduceOp::kSum, sum);
          },
          batch);
      for (int l = 0; l < local(); ++l) EXPECT_EQ(sums[l], total) << "step " << k;
    };
    int k = 0;
    if (loop == Loop::kRangeFor) {
      for (const PerReplica<Tensor>& batch : dataset) check(batch, k++);
      return k;
    }
    auto it = dataset.make_iterator();
    if (loop == Loop::kOptional) {
      while (std::optional<PerReplica<Tensor>> batch = it.get_next_as_optional()) check(*batch, k++);
      EXPECT_FALSE(it.get_next_as_optional().has_value());
      return k;
    }
    for (;;) {
      std::optional<PerReplica<Tensor>> batch;
      try {
        batch = it.get_next();
      } catch (const OutOfRangeError& e) {
        EXPECT_THAT(e.what(), HasSubstr("End of sequence"));
        break;
      }
      check(*batch, k++);
    }
    EXPECT_THROW(it.get_next(), OutOfRangeError);
    return k;
  }
};

TEST_F(UnevenInput, PerWorkerPipelinesEndingEarlyGiveEmptyBatchesUntilTheLast) {
  // Worker w's elements are (2, 3) batches of 100 w + i; the replicas of step k take elements
  // k L .. k L + L - 1.
  auto dataset = s.distribute_datasets_from_function([&](const InputContext& ctx) {
    const int w = ctx.input_pipeline_id();
    return batches(steps_of(w) * local(), 2, 100.0f * static_cast<float>(w));
  });
  const auto value = [&](int w, int l, int k) -> std::optional<float> {
    if (k >= steps_of(w)) return std::nullopt;
    return 100.0f * static_cast<float>(w) + static_cast<float>(k * local() + l);
  };
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kRangeFor), 3);
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kOptional), 3);
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kGetNext), 3);
}

TEST_F(UnevenInput, PerReplicaPipelinesEndingEarlyGiveEmptyBatchesUntilTheLast) {
  InputOptions options;
  options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  // Replica g's elements are (2, 3) batches of 100 g + k.
  auto dataset = s.distribute_datasets_from_function(
      [&](const InputContext& ctx) {
        const int g = ctx.input_pipeline_id();
        return batches(steps_of(g / local()), 2, 100.0f * static_cast<float>(g));
      },
      options);
  const auto value = [&](int w, int l, int k) -> std::optional<float> {
    if (k >= steps_of(w)) return std::nullopt;
    return 100.0f * static_cast<float>(w * local() + l) + static_cast<float>(k);
  };
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kRangeFor), 3);
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kOptional), 3);
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kGetNext), 3);
}

TEST_F(UnevenInput, GlobalBatchesEndingEarlyOnAWorkerGiveItsReplicasEmptyBatches) {
  // Each worker reads a dataset of its own (as a file-sharded pipeline would): global batches of
  // one row per replica, row g of batch k filled with 100 k + g.
  std::vector<float> values;
  const int mine = steps_of(worker());
  for (int k = 0; k < mine; ++k) {
    for (int g = 0; g < n(); ++g) {
      for (int c = 0; c < 3; ++c) values.push_back(100.0f * static_cast<float>(k) + static_cast<float>(g));
    }
  }
  auto dataset = s.experimental_distribute_dataset(
      data::Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>(values, Shape{mine * n(), 3})).batch(n()));
  const auto value = [&](int w, int l, int k) -> std::optional<float> {
    if (k >= steps_of(w)) return std::nullopt;
    return 100.0f * static_cast<float>(k) + static_cast<float>(w * local() + l);
  };
  EXPECT_EQ(run_to_end(dataset, 1, value, Loop::kRangeFor), 3);
  EXPECT_EQ(run_to_end(dataset, 1, value, Loop::kOptional), 3);
  EXPECT_EQ(run_to_end(dataset, 1, value, Loop::kGetNext), 3);
}

TEST_F(UnevenInput, AWorkerWithoutAnyElementModelsItsEmptyBatchesOnAnothers) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int last = workers() - 1;
  auto dataset = s.distribute_datasets_from_function([&](const InputContext& ctx) {
    const int w = ctx.input_pipeline_id();
    return batches(w == last ? 0 : 3 * local(), 2, 100.0f * static_cast<float>(w));
  });
  const auto value = [&](int w, int l, int k) -> std::optional<float> {
    if (w == last) return std::nullopt;
    return 100.0f * static_cast<float>(w) + static_cast<float>(k * local() + l);
  };
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kRangeFor), 3);
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kGetNext), 3);
}

TEST_F(UnevenInput, AWorkerWithoutAnyElementOfAListIsAnInvalidArgumentOnEveryWorker) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int last = workers() - 1;
  // Without an element, the last worker cannot know how many tensors a list holds.
  auto dataset = s.distribute_datasets_from_function([&](const InputContext& ctx) {
    const int w = ctx.input_pipeline_id();
    return batches(w == last ? 0 : 3 * local(), 2, 0.0f).map([](const Tensor& t) { return std::vector<Tensor>{t, t}; });
  });
  auto it = dataset.make_iterator();
  const std::string message =
      "DistributedIterator::get_next: " + workers_text(last, last) +
      " has no data for step 1 while other workers have, and its input pipeline has made no element in this pass to "
      "model its empty batches on; the other workers' elements are of another structure than a default-constructed "
      "element (a list or dict, whose size and keys only an element shows): give every worker at least one element "
      "per pass, or use elements of a fixed structure (a Tensor, pair, tuple, array or struct)";
  for (int call = 0; call < 2; ++call) {
    try {
      it.get_next();
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_STREQ(e.what(), message.c_str());
    }
  }
  expect_still_usable();
}

TEST_F(UnevenInput, AWorkerWithoutDataForScalarElementsIsAnInvalidArgumentOnEveryWorker) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  // Unbatched int64 scalars: no empty batch has the shape of a scalar.
  auto dataset = s.distribute_datasets_from_function(
      [&](const InputContext& ctx) { return data::range(steps_of(ctx.input_pipeline_id()) * local()); });
  auto it = dataset.make_iterator();
  it.get_next();
  it.get_next();
  for (int call = 0; call < 2; ++call) {
    try {
      it.get_next();
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_STREQ(e.what(), ("DistributedIterator::get_next: " + workers_text(workers() - 1, workers() - 1) +
                              " has no data for step 3 while other workers have, and the elements have a rank-0 leaf "
                              "(a scalar), so no empty batch can stand in for them; batch the dataset (with "
                              "drop_remainder to end every worker's loop at the first step that not every worker can "
                              "fill)")
                                 .c_str());
    }
  }
  expect_still_usable();
}

TEST_F(UnevenInput, DropRemainderEndsEveryLoopAtTheFirstStepNotEveryReplicaCanFill) {
  // The last worker has 2 steps' batches and a partial batch, which batch() drops; the others 3
  // steps'. The third step, which the last worker cannot fill, is dropped on every worker.
  auto dataset = s.distribute_datasets_from_function([&](const InputContext& ctx) {
    const int w = ctx.input_pipeline_id();
    const std::int64_t rows = steps_of(w) * local() * 2 + (w == workers() - 1 ? 1 : 0);
    std::vector<float> values(static_cast<std::size_t>(rows * 3), static_cast<float>(w + 1));
    return data::Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>(values, Shape{rows, 3}))
        .batch(2, /*drop_remainder=*/true);
  });
  const auto value = [&](int w, int, int) -> std::optional<float> { return static_cast<float>(w + 1); };
  const int expected = workers() > 1 ? 2 : 3;
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kRangeFor), expected);
  EXPECT_EQ(run_to_end(dataset, 2, value, Loop::kOptional), expected);
}

TEST_F(UnevenInput, APipelineRaisingOnOneWorkerStopsEveryWorkersLoop) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int last = workers() - 1;
  // The last worker's generator raises when asked for its second step's first element.
  auto dataset = s.distribute_datasets_from_function([&](const InputContext& ctx) {
    const bool raises = ctx.input_pipeline_id() == last;
    const int per_step = local();
    return data::Dataset<Tensor>::from_generator([raises, per_step] {
      return [raises, per_step, i = 0]() mutable -> std::optional<Tensor> {
        if (raises && i == per_step) throw std::runtime_error("no such file");
        if (i == 3 * per_step) return std::nullopt;
        ++i;
        return Tensor::from_vector<float>({1.0f, 2.0f});
      };
    });
  });
  auto it = dataset.make_iterator();
  EXPECT_EQ(it.get_next().num_replicas(), local());
  for (int call = 0; call < 2; ++call) {
    if (worker() == last) {
      EXPECT_THROW(
          {
            try {
              it.get_next();
            } catch (const std::runtime_error& e) {
              EXPECT_STREQ(e.what(), "no such file");
              throw;
            }
          },
          std::runtime_error);
      continue;
    }
    try {
      it.get_next();
      ADD_FAILURE() << "no error";
    } catch (const AbortedError& e) {
      EXPECT_STREQ(e.what(), ("DistributedIterator::get_next: the input pipeline of " + workers_text(last, last) +
                              " raised an error while making step 2 (see that worker's error); every worker's "
                              "iterator stops there")
                                 .c_str());
    }
  }
  expect_still_usable();
}

TEST_F(UnevenInput, WorkersAskingForDifferentStepsAreAnInvalidArgumentOnEveryWorker) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  auto dataset = s.distribute_datasets_from_function([&](const InputContext&) { return batches(3 * local(), 2, 0.0f); });
  auto first = dataset.make_iterator();
  first.get_next();
  // Worker 0 starts over while the others go on.
  auto second = worker() == 0 ? dataset.make_iterator() : first;
  try {
    second.get_next();
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(), ("DistributedIterator::get_next: " + workers_text(1, 1) +
                            " asks for step 2 of a distributed dataset where " + workers_text(0, 0) +
                            " asks for step 1; every worker must iterate its distributed datasets alike (the same "
                            "get_next calls, in the same order)")
                               .c_str());
  }
  expect_still_usable();
}

TEST_F(UnevenInput, GetNextAfterTheStrategyIsGoneIsAFailedPrecondition) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  std::optional<DistributedIterator<Tensor>> it;
  {
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = local_devices();
    MultiWorkerMirroredStrategy gone(options);
    it = gone.distribute_datasets_from_function([&](const InputContext&) { return batches(local(), 2, 0.0f); })
             .make_iterator();
  }
  for (int call = 0; call < 2; ++call) {
    try {
      it->get_next();
      ADD_FAILURE() << "no error";
    } catch (const FailedPreconditionError& e) {
      EXPECT_STREQ(e.what(), "DistributedIterator::get_next: the multi-worker strategy that distributed this dataset "
                             "was destroyed; iterate a distributed dataset while its strategy lives");
    }
  }
  expect_still_usable();
}

TEST_F(UnevenInput, AWorkerThatDoesNotAskForTheStepTimesOutThenTheInputIsUnavailable) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.communication.timeout = std::chrono::milliseconds(500);
  MultiWorkerMirroredStrategy timed(options);
  auto dataset = timed.distribute_datasets_from_function([&](const InputContext&) { return batches(local(), 2, 0.0f); });
  // The others wait for worker 0 in the binary's strategy, never asking for the step.
  const auto meet = [this] { s.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); }); };
  if (worker() != 0) {
    meet();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    dataset.make_iterator().get_next();
    ADD_FAILURE() << "no error";
  } catch (const DeadlineExceededError& e) {
    EXPECT_STREQ(e.what(), ("DistributedIterator::get_next: timed out after 0.5 s: " + workers_text(1, workers() - 1) +
                            " did not arrive while " + workers_text(0, 0) +
                            " waits to agree on step 1 of a distributed dataset; a worker is stuck or slow, or stopped "
                            "iterating (every worker must iterate its distributed datasets alike, to the end)")
                               .c_str());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  try {
    dataset.make_iterator().get_next();
    ADD_FAILURE() << "no error";
  } catch (const UnavailableError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the workers' distributed input is unusable after an earlier failure"));
  }
  meet();
}

}  // namespace
}  // namespace distribute
