// MultiWorkerMirroredStrategy across real processes: ctest launches this binary under
// `mpirun -np W` with `--local_replicas=L` (2x2, 3x1, 4x1, 1x2), and every process checks the
// same expectations from its own side: global replica ids, the values of TF's test cases
// generalised to W x L (for 2 x 2: SUM of 1.0 is 4.0, SUM of ids 6, [1,2,3,4][g] sums to 10 and
// averages 2.5, all_gather of (1,2,2) gives (4,2,2), (1,8,2), (1,2,8)), merge_call once per worker,
// Strategy::reduce with uneven batches (an exact MEAN), gather, reduce_to, batch_reduce_to; and the
// errors that name the worker and replicas when workers differ, raise or return early, after which
// the strategy stays usable; workers with different local replica counts get InvalidArgumentError
// at construction; a worker that does not arrive gives DeadlineExceededError and then
// UnavailableError; strategies on sub-communicators have their ranks as workers; a strategy whose
// stalled data phases fail it (StalledCollectiveAction::kFailStrategy) gives the same results.
// Distributed input whose workers' pipelines end at different steps runs the same steps on every
// worker, the workers without data giving their replicas empty batches, under each input policy;
// and its errors come alike on every worker.
//
// With `--device=gpu` every worker's replicas are GPUs, joined by one NCCL communicator spanning
// the workers, and every test runs the same way on them (ctest's multi_worker_gpu_*; they skip,
// exit code 77, where no GPU is visible).
#include <gmock/gmock.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/mpi/mpi_cluster_resolver.h"
#if DISTRIBUTE_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace distribute {
namespace {

using ::testing::HasSubstr;

int g_local_replicas = 2;
// "CPU:" or "GPU:"; on GPUs, worker w's replica l is GPU:(g_first_gpu + l).
std::string g_device_type = "CPU:";
int g_first_gpu = 0;

std::string local_device(int l) {
  return g_device_type + std::to_string((g_device_type == "GPU:" ? g_first_gpu : 0) + l);
}

std::vector<std::string> local_devices() {
  std::vector<std::string> devices;
  for (int l = 0; l < g_local_replicas; ++l) devices.push_back(local_device(l));
  return devices;
}

// One strategy for the whole binary: constructing one is collective across the workers, and the
// error tests check that it stays usable.
// Each worker's host name (MPI_Get_processor_name), filled by main.
std::vector<std::string> g_hosts;

MultiWorkerMirroredStrategy& strategy() {
  static MultiWorkerMirroredStrategy* s = [] {
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = local_devices();
    options.communication.timeout = std::chrono::seconds(20);
    return new MultiWorkerMirroredStrategy(options);
  }();
  return *s;
}

class MultiWorker : public ::testing::Test {
 protected:
  // "worker 1 (replicas 2, 3)", "workers 1, 2 (replicas 1, 2)": workers [first, last] as errors name them;
  // on several hosts with theirs: "worker 1 on host1 (replicas 2, 3)".
  std::string workers_text(int first, int last) const {
    std::vector<int> ws;
    for (int w = first; w <= last; ++w) ws.push_back(w);
    return workers_text(ws);
  }
  std::string workers_text(const std::vector<int>& workers) const {
    std::string ws;
    std::string rs;
    std::vector<std::string> hosts;
    for (int w : workers) {
      ws += (ws.empty() ? "" : ", ") + std::to_string(w);
      for (int l = 0; l < local(); ++l) rs += (rs.empty() ? "" : ", ") + std::to_string(w * local() + l);
      const std::string& host = g_hosts[static_cast<std::size_t>(w)];
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    }
    const bool one_host = std::adjacent_find(g_hosts.begin(), g_hosts.end(), std::not_equal_to<>()) == g_hosts.end();
    std::string on;
    for (const std::string& host : hosts) on += (on.empty() ? " on " : ", ") + host;
    return (workers.size() == 1 ? "worker " : "workers ") + ws + (one_host ? "" : on) +
           (local() == 1 && workers.size() == 1 ? " (replica " : " (replicas ") + rs + ")";
  }
  MultiWorkerMirroredStrategy& s = strategy();
  int workers() const { return s.extended().num_workers(); }
  int worker() const { return s.extended().worker_id(); }
  int local() const { return s.extended().num_local_replicas(); }
  int n() const { return s.num_replicas_in_sync(); }
  // After an error every worker's strategy still runs collectives.
  void expect_still_usable() {
    EXPECT_EQ(s.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1); })[0], n());
  }
};

TEST_F(MultiWorker, IdsAndPlaceInTheJobAreGlobal) {
  int size = 0;
  EXPECT_EQ(local(), g_local_replicas);
  EXPECT_EQ(n(), workers() * local());
  EXPECT_EQ(s.extended().in_multi_worker_mode(), workers() > 1);
  EXPECT_EQ(s.extended().should_checkpoint(), worker() == 0);
  EXPECT_EQ(s.extended().should_save_summary(), worker() == 0);
  EXPECT_TRUE(s.extended().experimental_between_graph() && s.extended().experimental_should_init());
  EXPECT_EQ(s.cluster_resolver().task_type(), "worker");
  EXPECT_EQ(s.cluster_resolver().task_id(), worker());
  size = s.cluster_resolver().cluster_spec().num_tasks("worker");
  EXPECT_EQ(size, workers());
  const InputContext input = s.extended().input_context();
  EXPECT_EQ(input.num_input_pipelines(), workers());
  EXPECT_EQ(input.input_pipeline_id(), worker());
  EXPECT_EQ(input.num_replicas_in_sync(), n());

  PerReplica<int> ids = s.run([] { return get_replica_context()->replica_id_in_sync_group(); });
  PerReplica<int> locals = s.run([] { return get_replica_context()->local_replica_id(); });
  PerReplica<int> sizes = s.run([] { return get_replica_context()->num_replicas_in_sync(); });
  std::vector<int> expected_ids(static_cast<std::size_t>(local()));
  std::iota(expected_ids.begin(), expected_ids.end(), worker() * local());
  std::vector<int> expected_locals(static_cast<std::size_t>(local()));
  std::iota(expected_locals.begin(), expected_locals.end(), 0);
  EXPECT_EQ(s.experimental_local_results(ids), expected_ids);  // 2x2: [0,1] on worker 0, [2,3] on worker 1
  EXPECT_EQ(s.experimental_local_results(locals), expected_locals);
  EXPECT_EQ(sizes.values(), std::vector<int>(static_cast<std::size_t>(local()), n()));
}

TEST_F(MultiWorker, AllReduceSumsAndAveragesOverEveryWorker) {
  PerReplica<float> sum = s.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  PerReplica<float> mean = s.run([] { return get_replica_context()->all_reduce(ReduceOp::kMean, 1.0f); });
  PerReplica<std::int32_t> ids = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    return ctx.all_reduce(ReduceOp::kSum, static_cast<std::int32_t>(ctx.replica_id_in_sync_group()));
  });
  // Replica g passes [1, 2, ..., N][g]: 2x2 sums to 10 and averages 2.5.
  PerReplica<Tensor> values = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const auto g = static_cast<float>(ctx.replica_id_in_sync_group());
    return ctx.all_reduce(ReduceOp::kSum, Tensor::from_vector<float>({g + 1, 10 * (g + 1)}, Shape{2}));
  });
  PerReplica<Tensor> means = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const auto g = static_cast<double>(ctx.replica_id_in_sync_group());
    return ctx.all_reduce(ReduceOp::kMean, Tensor::scalar<double>(g + 1));
  });
  const double total = n() * (n() + 1) / 2.0;
  for (int l = 0; l < local(); ++l) {
    EXPECT_EQ(sum[l], static_cast<float>(n()));
    EXPECT_EQ(mean[l], 1.0f);
    EXPECT_EQ(ids[l], n() * (n() - 1) / 2);
    EXPECT_EQ(values[l].to_vector<float>(), (std::vector<float>{static_cast<float>(total), static_cast<float>(10 * total)}));
    EXPECT_DOUBLE_EQ(means[l].item<double>(), (n() + 1) / 2.0);
  }
}

TEST_F(MultiWorker, AllReduceOfANestOfManyLeavesAndDtypes) {
  // Leaves of several dtypes in one call, and a large leaf: over 16 MiB, one whole ring here
  // (kEndJob), several pieces in FailStrategyModeGivesTheSameResults.
  constexpr std::int64_t kLarge = (std::int64_t{16} << 20) / 4 + 1000;
  auto result = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int g = ctx.replica_id_in_sync_group();
    std::vector<Tensor> leaves{Tensor::from_vector<std::int64_t>({g, 1}, Shape{2}),
                               Tensor::from_vector<float>(std::vector<float>(kLarge, 1.0f), Shape{kLarge}),
                               Tensor::scalar<std::int32_t>(g)};
    return ctx.all_reduce(ReduceOp::kSum, leaves);
  });
  for (int l = 0; l < local(); ++l) {
    const std::vector<Tensor>& leaves = result[l];
    EXPECT_EQ(leaves[0].to_vector<std::int64_t>(), (std::vector<std::int64_t>{n() * (n() - 1) / 2, n()}));
    const std::vector<float> large = leaves[1].to_vector<float>();
    EXPECT_EQ(large.front(), static_cast<float>(n()));
    EXPECT_EQ(large.back(), static_cast<float>(n()));
    EXPECT_EQ(leaves[2].item<std::int32_t>(), n() * (n() - 1) / 2);
  }
}

TEST_F(MultiWorker, HalfPrecisionAllReducesAddInFloat32AcrossWorkers) {
  const auto reduce = [this](ReduceOp op) {
    return s.run([op] {
      ReplicaContext& ctx = *get_replica_context();
      const auto g = static_cast<float>(ctx.replica_id_in_sync_group());
      std::vector<Tensor> leaves{Tensor::from_vector<Half>({Half(g + 1), Half(0.5f)}, Shape{2}),
                                 Tensor::from_vector<BFloat16>({BFloat16(g + 1), BFloat16(0.25f)}, Shape{2})};
      return ctx.all_reduce(op, leaves);
    });
  };
  const PerReplica<std::vector<Tensor>> all_sums = reduce(ReduceOp::kSum);
  const PerReplica<std::vector<Tensor>> all_means = reduce(ReduceOp::kMean);
  const float total = static_cast<float>(n() * (n() + 1) / 2);
  for (int l = 0; l < local(); ++l) {
    const std::vector<Tensor>& sums = all_sums[l];
    const std::vector<Tensor>& means = all_means[l];
    EXPECT_EQ(sums[0].dtype(), DType::kFloat16);
    EXPECT_EQ(sums[0].to_vector<Half>(), (std::vector<Half>{Half(total), Half(0.5f * static_cast<float>(n()))}));
    EXPECT_EQ(sums[1].to_vector<BFloat16>(),
              (std::vector<BFloat16>{BFloat16(total), BFloat16(0.25f * static_cast<float>(n()))}));
    EXPECT_EQ(means[0].to_vector<Half>(), (std::vector<Half>{Half(total / static_cast<float>(n())), Half(0.5f)}));
    EXPECT_EQ(means[1].to_vector<BFloat16>(),
              (std::vector<BFloat16>{BFloat16(total / static_cast<float>(n())), BFloat16(0.25f)}));
  }
}

TEST_F(MultiWorker, ReduceScatterGivesEachGlobalReplicaItsShard) {
  // Replica g passes [g + i for i < 11] and [10 g] (a leaf shorter than most replica counts):
  // replica g gets shard g of the sums over every worker's replicas, by global id.
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
    PerReplica<std::vector<Tensor>> shards = s.run([op] {
      ReplicaContext& ctx = *get_replica_context();
      const auto g = static_cast<double>(ctx.replica_id_in_sync_group());
      std::vector<double> v;
      for (int i = 0; i < 11; ++i) v.push_back(g + i);
      return ctx.reduce_scatter(op, std::vector<Tensor>{Tensor::from_vector<double>(v), Tensor::from_vector<double>({10 * g})});
    });
    const double ids = n() * (n() - 1) / 2.0;
    const double divisor = op == ReduceOp::kMean ? n() : 1;
    for (int l = 0; l < local(); ++l) {
      const int g = worker() * local() + l;
      const Shard first = shard_of(11, n(), g);
      std::vector<double> expected;
      for (std::int64_t i = first.begin; i < first.begin + first.size; ++i) expected.push_back((n() * i + ids) / divisor);
      EXPECT_EQ(shards[l][0].to_vector<double>(), expected) << "replica " << g;
      const Shard second = shard_of(1, n(), g);
      EXPECT_EQ(shards[l][1].to_vector<double>(),
                second.size == 0 ? std::vector<double>{} : std::vector<double>{10 * ids / divisor});
    }
  }
}

TEST_F(MultiWorker, ReduceScatterWithAnotherShapeOnTheLastWorkerIsAnInvalidArgumentEverywhere) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int last = workers() - 1;
  try {
    s.run([this, last] {
      const std::int64_t size = worker() == last ? 5 : 4;
      get_replica_context()->reduce_scatter(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{size}));
    });
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("reduce_scatter #1: " + workers_text(last, last) + " passed float32[5]"));
  }
  expect_still_usable();
}

TEST_F(MultiWorker, AllGatherConcatenatesEveryWorkersReplicasInIdOrder) {
  for (int axis = 0; axis < 3; ++axis) {
    PerReplica<Tensor> gathered = s.run([axis] {
      ReplicaContext& ctx = *get_replica_context();
      const auto g = static_cast<float>(ctx.replica_id_in_sync_group());
      return ctx.all_gather(Tensor::from_vector<float>({g, g, g, g}, Shape{1, 2, 2}), axis);
    });
    std::vector<std::int64_t> dims{1, 2, 2};
    dims[static_cast<std::size_t>(axis)] *= n();
    for (int l = 0; l < local(); ++l) {
      const Tensor& t = gathered[l];
      EXPECT_EQ(t.shape(), Shape(dims)) << "axis " << axis;  // 2x2: (4,2,2), (1,8,2), (1,2,8)
      const std::vector<float> v = t.to_vector<float>();
      // Along axis 0 replica g's four values come g-th; along the others each row holds every
      // replica's values in id order.
      if (axis == 0) {
        for (int g = 0; g < n(); ++g) EXPECT_EQ(v[static_cast<std::size_t>(4 * g)], static_cast<float>(g));
      } else if (axis == 2) {
        for (int g = 0; g < n(); ++g) EXPECT_EQ(v[static_cast<std::size_t>(2 * g + 1)], static_cast<float>(g));
      }
    }
  }
}

TEST_F(MultiWorker, AllGatherTakesUnevenSizesAlongTheAxis) {
  PerReplica<Tensor> gathered = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int g = ctx.replica_id_in_sync_group();
    // Replica g brings g + 1 rows of [g, g].
    return ctx.all_gather(Tensor::from_vector<std::int32_t>(std::vector<std::int32_t>(2 * (g + 1), g), Shape{g + 1, 2}), 0);
  });
  std::vector<std::int32_t> expected;
  for (int g = 0; g < n(); ++g) expected.insert(expected.end(), static_cast<std::size_t>(2 * (g + 1)), g);
  for (int l = 0; l < local(); ++l) {
    EXPECT_EQ(gathered[l].shape(), (Shape{n() * (n() + 1) / 2, 2}));
    EXPECT_EQ(gathered[l].to_vector<std::int32_t>(), expected);
  }
}

TEST_F(MultiWorker, MergeCallRunsOncePerWorkerAndItsReduceIsCollective) {
  int calls = 0;
  PerReplica<float> result = s.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const auto g = static_cast<float>(ctx.replica_id_in_sync_group());
    return ctx.merge_call(
        [&](Strategy& strategy, const PerReplica<float>& values) {
          ++calls;
          EXPECT_EQ(values.num_replicas(), local());
          return strategy.reduce(ReduceOp::kSum, values, std::nullopt);
        },
        g);
  });
  EXPECT_EQ(calls, 1);
  for (int l = 0; l < local(); ++l) EXPECT_EQ(result[l], static_cast<float>(n() * (n() - 1) / 2));
}

TEST_F(MultiWorker, StrategyReduceIsExactOverUnevenBatches) {
  // Replica g holds g + 1 rows of value g: the MEAN over rows is sum(g (g + 1)) / sum(g + 1).
  PerReplica<Tensor> batches = s.experimental_distribute_values_from_function([](const ValueContext& ctx) {
    const int g = ctx.replica_id_in_sync_group();
    return Tensor::from_vector<double>(std::vector<double>(static_cast<std::size_t>(g + 1), g), Shape{g + 1});
  });
  double weighted = 0;
  double rows = 0;
  for (int g = 0; g < n(); ++g) {
    weighted += g * (g + 1.0);
    rows += g + 1;
  }
  EXPECT_DOUBLE_EQ(s.reduce(ReduceOp::kMean, batches, 0).item<double>(), weighted / rows);
  EXPECT_DOUBLE_EQ(s.reduce(ReduceOp::kSum, batches, 0).item<double>(), weighted);
  PerReplica<float> ones = s.run([] { return 1.0f; });
  EXPECT_EQ(s.reduce(ReduceOp::kSum, ones, std::nullopt), static_cast<float>(n()));
  EXPECT_EQ(s.reduce(ReduceOp::kMean, ones, std::nullopt), 1.0f);
  // The ValueContext is global too.
  PerReplica<int> ids = s.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return ctx.replica_id_in_sync_group() * 100 + ctx.num_replicas_in_sync(); });
  for (int l = 0; l < local(); ++l) EXPECT_EQ(ids[l], (worker() * local() + l) * 100 + n());
}

TEST_F(MultiWorker, GatherReduceToAndBatchReduceToCoverEveryWorker) {
  PerReplica<Tensor> values = s.experimental_distribute_values_from_function([](const ValueContext& ctx) {
    const int g = ctx.replica_id_in_sync_group();
    return Tensor::from_vector<float>({static_cast<float>(g)}, Shape{1});
  });
  std::vector<float> ids(static_cast<std::size_t>(n()));
  std::iota(ids.begin(), ids.end(), 0.0f);
  EXPECT_EQ(s.gather(values, 0).to_vector<float>(), ids);
  const float total = n() * (n() - 1) / 2.0f;
  EXPECT_EQ(s.extended().reduce_to(ReduceOp::kSum, values, Device::cpu()).to_vector<float>(), std::vector<float>{total});
  std::vector<Tensor> batch = s.extended().batch_reduce_to(ReduceOp::kMean, {{values, Device::cpu()}, {values, Device::cpu()}});
  ASSERT_EQ(batch.size(), 2u);
  for (const Tensor& t : batch) EXPECT_EQ(t.to_vector<float>(), std::vector<float>{total / static_cast<float>(n())});
}

TEST_F(MultiWorker, EachWorkerReadsItsShardOfTheGlobalBatch) {
  // Global batches of 2 rows per replica, row i holding i: replica g gets rows 2g and 2g + 1.
  const std::int64_t batch = 2 * n();
  auto dataset = data::range(3 * batch).batch(batch);
  EXPECT_EQ(s.experimental_distribute_dataset(dataset).num_replicas_in_sync(), n());
  std::int64_t step = 0;
  for (const PerReplica<Tensor>& rows : s.experimental_distribute_dataset(dataset)) {
    ASSERT_EQ(rows.num_replicas(), local());
    for (int l = 0; l < local(); ++l) {
      const std::int64_t g = worker() * local() + l;
      EXPECT_EQ(rows[l].to_vector<std::int64_t>(),
                (std::vector<std::int64_t>{step * batch + 2 * g, step * batch + 2 * g + 1}));
    }
    ++step;
  }
  EXPECT_EQ(step, 3);
  // dataset_fn sees this worker's place, to shard its own pipeline.
  InputContext seen;
  auto from_function = s.distribute_datasets_from_function([&](const InputContext& ctx) {
    seen = ctx;
    return data::range(4).batch(1).shard(ctx.num_input_pipelines(), ctx.input_pipeline_id());
  });
  EXPECT_EQ(seen.num_input_pipelines(), workers());
  EXPECT_EQ(seen.input_pipeline_id(), worker());
  EXPECT_EQ(seen.num_replicas_in_sync(), n());
  EXPECT_EQ(from_function.num_replicas_in_sync(), n());
}

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

TEST_F(MultiWorker, MirroredVariableUpdatesStayInSyncAcrossWorkers) {
  Variable sum;
  Variable mean;
  {
    StrategyScope scope = s.scope();
    sum = Variable(0.0f, {.name = "sum", .aggregation = VariableAggregation::kSum});
    mean = Variable(0.0f, {.name = "mean", .aggregation = VariableAggregation::kMean});
  }
  EXPECT_EQ(s.experimental_local_results(sum).size(), static_cast<std::size_t>(local()));
  s.run([&] {
    const auto g = static_cast<float>(get_replica_context()->replica_id_in_sync_group());
    sum.assign_add(Tensor::scalar(g));
    mean.assign_add(Tensor::scalar(g));
  });
  for (const Tensor& c : s.experimental_local_results(sum)) EXPECT_EQ(c.item<float>(), n() * (n() - 1) / 2.0f);
  for (const Tensor& c : s.experimental_local_results(mean)) EXPECT_EQ(c.item<float>(), (n() - 1) / 2.0f);
}

TEST_F(MultiWorker, ShardedAdamStepsAreBitIdenticalToUnshardedAdam) {
  // Two copies of one variable of 37 elements (uneven shards for every layout here), one trained
  // by an Adam with sharded state, one by a plain Adam, from the same per-replica gradients.
  Variable plain_w;
  Variable sharded_w;
  std::unique_ptr<optimizers::Adam> plain;
  std::unique_ptr<optimizers::Adam> sharded;
  std::vector<float> initial(37);
  for (std::size_t i = 0; i < initial.size(); ++i) initial[i] = 0.1f * static_cast<float>(i) - 1.5f;
  {
    StrategyScope scope = s.scope();
    plain_w = Variable(Tensor::from_vector<float>(initial), {.name = "plain"});
    sharded_w = Variable(Tensor::from_vector<float>(initial), {.name = "sharded"});
    plain = std::make_unique<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.05});
    sharded = std::make_unique<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.05},
                                                 optimizers::OptimizerOptions{.shard_state = true});
  }
  for (int step = 0; step < 3; ++step) {
    s.run([&] {
      const int g = get_replica_context()->replica_id_in_sync_group();
      std::vector<float> gradient(37);
      for (std::size_t i = 0; i < gradient.size(); ++i) {
        gradient[i] = std::sin(static_cast<float>(i * 7 + g * 13 + step * 31));
      }
      plain->apply_gradients({{Tensor::from_vector<float>(gradient), plain_w}});
      sharded->apply_gradients({{Tensor::from_vector<float>(gradient), sharded_w}});
    });
  }
  const std::vector<Tensor> a = s.experimental_local_results(plain_w);
  const std::vector<Tensor> b = s.experimental_local_results(sharded_w);
  for (std::size_t c = 0; c < a.size(); ++c) {
    EXPECT_NE(a[c].to_vector<float>(), initial);
    const std::vector<float> x = a[c].to_vector<float>();
    const std::vector<float> y = b[c].to_vector<float>();
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "component " << c;
  }
  // The sharded slots, read whole for a checkpoint (gathered across the workers), are the plain
  // optimizer's slots.
  for (const auto& [name, state] : sharded->checkpoint_state()) {
    if (name == "Adam/iterations") continue;
    const std::string slot = name.substr(name.rfind('/') + 1);
    EXPECT_EQ(name, "Adam/sharded/" + slot);
    EXPECT_EQ(state.read().to_vector<float>(), plain->get_slot(plain_w, slot).value().to_vector<float>()) << name;
  }
}

TEST_F(MultiWorker, OnlyFirstReplicaAndNoneUpdatesTakeGlobalReplicaZerosValue) {
  Variable first;
  Variable none;
  {
    StrategyScope scope = s.scope();
    first = Variable(0.0f, {.name = "first", .aggregation = VariableAggregation::kOnlyFirstReplica});
    none = Variable(0.0f, {.name = "none", .aggregation = VariableAggregation::kNone});
  }
  // Global replica 0's bits reach every worker as they are: -0.0 stays -0.0.
  s.run([&] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    first.assign(Tensor::scalar(g == 0 ? -0.0f : 3.0f));
    none.assign(Tensor::scalar(-0.0f));
  });
  for (const Variable& v : {first, none}) {
    for (const Tensor& c : s.experimental_local_results(v)) {
      EXPECT_EQ(c.item<float>(), 0.0f) << v.name();
      EXPECT_TRUE(std::signbit(c.item<float>())) << v.name() << " lost the sign of -0.0";
    }
  }
  s.run([&] {
    const auto g = static_cast<float>(get_replica_context()->replica_id_in_sync_group());
    first.assign(Tensor::scalar(g + 5));  // replica 0 on worker 0 passes 5
    none.assign(Tensor::scalar(7.0f));
  });
  for (const Tensor& c : s.experimental_local_results(first)) EXPECT_EQ(c.item<float>(), 5.0f);
  for (const Tensor& c : s.experimental_local_results(none)) EXPECT_EQ(c.item<float>(), 7.0f);
  // With NONE, a replica on the last worker that passes another value is named on every worker.
  if (n() < 2) return;
  const int odd = n() - 1;
  try {
    s.run([&] {
      const int g = get_replica_context()->replica_id_in_sync_group();
      none.assign(Tensor::scalar(g == odd ? 8.0f : 7.0f));
    });
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(std::string(e.what()), "Variable 'none': assign with aggregation NONE in replica context needs the same "
                                     "value on every replica, but replica " + std::to_string(odd) +
                                         " passed another value than replica 0; give the variable an aggregation "
                                         "(SUM, MEAN, ONLY_FIRST_REPLICA) or pass equal values");
  }
  for (const Tensor& c : s.experimental_local_results(none)) EXPECT_EQ(c.item<float>(), 7.0f);
  expect_still_usable();
}

// The last worker's replicas update (or apply gradients to) another variable than the others' at
// the same point: every worker fails with the error naming both, and no component changes.
TEST_F(MultiWorker, WorkersUpdatingDifferentVariablesAreNamedOnEveryWorker) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const bool last = worker() == workers() - 1;
  const std::string others = workers_text(0, workers() - 2);
  const std::string odd = workers_text(workers() - 1, workers() - 1);
  for (const VariableAggregation aggregation :
       {VariableAggregation::kSum, VariableAggregation::kOnlyFirstReplica, VariableAggregation::kNone}) {
    Variable a;
    Variable b;
    {
      StrategyScope scope = s.scope();
      a = Variable(0.0f, {.name = "a", .aggregation = aggregation});
      b = Variable(0.0f, {.name = "b", .aggregation = aggregation});
    }
    try {
      s.run([&] { (last ? b : a).assign(Tensor::scalar(1.0f)); });
      ADD_FAILURE() << "no error for " << aggregation;
    } catch (const InvalidArgumentError& e) {
      EXPECT_THAT(e.what(), HasSubstr(others + " called assign of 'a' where " + odd + " called assign of 'b'"));
      EXPECT_THAT(e.what(), HasSubstr("every worker must make the same updates in the same order"));
    }
    for (const Variable& v : {a, b}) {
      for (const Tensor& c : s.experimental_local_results(v)) EXPECT_EQ(c.item<float>(), 0.0f);
    }
  }
  Variable w1;
  Variable w2;
  {
    StrategyScope scope = s.scope();
    w1 = Variable(Tensor::from_vector<float>({1, 1}), {.name = "w1"});
    w2 = Variable(Tensor::from_vector<float>({5, 5}), {.name = "w2"});
  }
  std::optional<optimizers::SGD> sgd;
  {
    StrategyScope scope = s.scope();
    sgd.emplace(1.0);
    sgd->build({w1, w2});
  }
  try {
    s.run([&] {
      const Tensor g1 = Tensor::from_vector<float>({1, 1});
      const Tensor g2 = Tensor::from_vector<float>({100, 100});
      if (last) {
        sgd->apply_gradients({{g2, w2}, {g1, w1}});
      } else {
        sgd->apply_gradients({{g1, w1}, {g2, w2}});
      }
    });
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("all_reduce #1 (leaf 0): " + others + " called SGD.apply_gradients of 'w1' where " +
                                    odd + " called SGD.apply_gradients of 'w2'"));
  }
  for (const Tensor& c : s.experimental_local_results(w1)) EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 1}));
  for (const Tensor& c : s.experimental_local_results(w2)) EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{5, 5}));
  expect_still_usable();
}

// A variable created inside run is created once for every replica of every worker, with global
// replica 0's initial value; the workers create it in the same order, so its later updates pair.
TEST_F(MultiWorker, VariableCreatedInsideRunTakesGlobalReplicaZerosValue) {
  PerReplica<Variable> made = s.run([] {
    const auto g = static_cast<float>(get_replica_context()->replica_id_in_sync_group());
    Variable v(Tensor::from_vector<float>({g + 3}), {.name = "lazy", .aggregation = VariableAggregation::kSum});
    v.assign_add(Tensor::from_vector<float>({1}));
    return v;
  });
  for (const Tensor& c : s.experimental_local_results(made[0])) {
    EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{3.0f + static_cast<float>(n())}));
  }
}

TEST_F(MultiWorker, OnReadVariableReadsAggregateEveryWorkersComponents) {
  Variable count;
  {
    StrategyScope scope = s.scope();
    count = Variable(0.0f, {.name = "count",
                            .synchronization = VariableSynchronization::kOnRead,
                            .aggregation = VariableAggregation::kSum});
    count.assign(Tensor::scalar(10.0f));  // each of the n components gets 10 / n
  }
  s.run([&] { count.assign_add(Tensor::scalar(1.0f)); });  // no collective: each replica its own
  StrategyScope scope = s.scope();
  EXPECT_FLOAT_EQ(count.value().item<float>(), 10.0f + static_cast<float>(n()));
}

// `fn` throws exactly E, whose message holds every one of `words`.
template <class E, class Fn>
void expect_thrown(Fn&& fn, const std::vector<std::string>& words) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_EQ(typeid(e), typeid(E)) << e.what();
    for (const std::string& word : words) EXPECT_THAT(e.what(), ::testing::HasSubstr(word));
  }
}

// A scratch directory of the chief's, in its temporary directory (each host may have its own) and
// named after its process id: the path every worker's CheckpointManager returns. Its characters
// reach every worker as a sum in which the other replicas add zeros.
std::filesystem::path chief_scratch(MultiWorkerMirroredStrategy& s, const std::string& stem) {
  const std::string mine = (std::filesystem::temp_directory_path() / (stem + std::to_string(::getpid()))).string();
  constexpr std::size_t kLongest = 1024;
  EXPECT_LT(mine.size(), kLongest);
  std::vector<std::int32_t> chars(kLongest, 0);
  std::copy(mine.begin(), mine.end(), chars.begin());
  const Tensor sum = s.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const bool chief = ctx.replica_id_in_sync_group() == 0;
    return ctx.all_reduce(ReduceOp::kSum, chief ? Tensor::from_vector<std::int32_t>(chars, Shape{kLongest}, Device::cpu())
                                                : Tensor::zeros(DType::kInt32, Shape{kLongest}, Device::cpu()));
  })[0];
  std::string path;
  for (std::int32_t c : sum.to_vector<std::int32_t>()) {
    if (c == 0) break;
    path.push_back(static_cast<char>(c));
  }
  return path;
}

// The chief (worker 0) alone touches the checkpoint's directory: the other workers are given
// paths that do not exist, as on hosts without the chief's file system, and never create them.
TEST_F(MultiWorker, CheckpointsAreWrittenAndReadByTheChiefAlone) {
  namespace fs = std::filesystem;
  const fs::path missing = fs::path("/nonexistent_distribute") / std::to_string(worker());
  const fs::path chief_dir = chief_scratch(s, "distribute_mw_ckpt_");
  const fs::path dir = worker() == 0 ? chief_dir : missing;
  if (worker() == 0) fs::remove_all(dir);
  StrategyScope scope = s.scope();
  Variable w(Tensor::from_vector<float>({1, 2, 3}, {3}, Device::cpu()), {.name = "w"});
  Variable seen(0.0f, {.name = "seen",
                       .synchronization = VariableSynchronization::kOnRead,
                       .aggregation = VariableAggregation::kSum});
  s.run([&] { seen.assign_add(static_cast<float>(get_replica_context()->replica_id_in_sync_group() + 1)); });
  const float total = static_cast<float>(n() * (n() + 1) / 2);
  {
    CheckpointManager manager(Checkpoint({{"w", w}, {"seen", seen}}), dir, {.max_to_keep = 1});
    EXPECT_EQ(manager.save(), chief_dir / "ckpt-1.safetensors");
    EXPECT_EQ(manager.save(), chief_dir / "ckpt-2.safetensors") << "the chief's numbering on every worker";
  }
  w.assign(Tensor::zeros(DType::kFloat32, Shape{3}, Device::cpu()));
  seen.assign(0.0f);
  CheckpointManager relaunched(Checkpoint({{"w", w}, {"seen", seen}}), dir);
  EXPECT_EQ(relaunched.checkpoints(), std::vector<fs::path>{chief_dir / "ckpt-2.safetensors"}) << "the chief's index";
  EXPECT_EQ(relaunched.restore_or_initialize(), chief_dir / "ckpt-2.safetensors");
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(seen.value().item<float>(), total) << "the aggregate over every worker's replicas, saved and restored";
  Checkpoint({{"w", w}, {"seen", seen}}).restore(worker() == 0 ? dir / "ckpt-2.safetensors" : missing / "any");
  if (worker() == 0) {
    EXPECT_TRUE(fs::exists(dir / "ckpt.index.json"));
    EXPECT_FALSE(fs::exists(dir / "ckpt-1.safetensors")) << "max_to_keep";
    fs::remove_all(dir);
  } else {
    EXPECT_FALSE(fs::exists(missing.parent_path())) << "a worker other than the chief touched its path";
  }
}

// Every worker's manager answers with the chief's paths, whatever directory string it was given
// (another path, a relative one): the checkpoints are the chief's files, named as the chief names
// them.
TEST_F(MultiWorker, EveryWorkerReturnsTheChiefsPathsWhateverItsDirectoryString) {
  namespace fs = std::filesystem;
  const fs::path chief_dir = chief_scratch(s, "distribute_mw_paths_");
  const fs::path dir = worker() == 0 ? chief_dir : fs::path("elsewhere") / std::to_string(worker());
  if (worker() == 0) fs::remove_all(dir);
  StrategyScope scope = s.scope();
  Variable w(1.0f, {.name = "w"});
  {
    CheckpointManager manager(Checkpoint({{"w", w}}), dir, {.max_to_keep = 2});
    EXPECT_EQ(manager.directory(), chief_dir);
    EXPECT_EQ(manager.save(), chief_dir / "ckpt-1.safetensors");
    EXPECT_EQ(manager.save(5), chief_dir / "ckpt-5.safetensors");
    EXPECT_EQ(manager.latest_checkpoint(), chief_dir / "ckpt-5.safetensors");
    EXPECT_EQ(manager.checkpoints(),
              (std::vector<fs::path>{chief_dir / "ckpt-1.safetensors", chief_dir / "ckpt-5.safetensors"}));
  }
  CheckpointManager relaunched(Checkpoint({{"w", w}}), dir);
  EXPECT_EQ(relaunched.directory(), chief_dir);
  EXPECT_EQ(relaunched.restore_or_initialize(), chief_dir / "ckpt-5.safetensors");
  EXPECT_EQ(relaunched.latest_checkpoint(), chief_dir / "ckpt-5.safetensors");
  if (worker() == 0) {
    fs::remove_all(dir);
  } else {
    EXPECT_FALSE(fs::exists("elsewhere")) << "a worker other than the chief touched its path";
  }
}

TEST_F(MultiWorker, AChiefThatCannotSaveOrRestoreFailsEveryWorkerAlike) {
  namespace fs = std::filesystem;
  StrategyScope scope = s.scope();
  Variable w(1.0f, {.name = "w"});
  const std::string chief = worker() == 0 ? "" : "worker 0, the chief, failed: ";
  // Saving over a directory fails at the rename.
  expect_thrown<InternalError>([&] { Checkpoint({{"w", w}}).save(fs::temp_directory_path()); },
                               {chief + "Checkpoint::save"});
  expect_thrown<InvalidArgumentError>(
      [&] { Checkpoint({{"w", w}}).restore("/nonexistent_distribute/ckpt.safetensors"); },
      {chief + "Checkpoint::restore: cannot open \"/nonexistent_distribute/ckpt.safetensors\""});
  expect_thrown<InvalidArgumentError>([&] { CheckpointManager(Checkpoint({{"w", w}}), "/proc/distribute_ckpt"); },
                                      {chief + "CheckpointManager: cannot create the directory \"/proc/distribute_ckpt\""});
  expect_still_usable();
}

// Worker 1 restores where the others save, by hand and through managers: every worker throws the
// same InvalidArgumentError before anything is written or sent, and no worker waits for another.
TEST_F(MultiWorker, WorkersMakingDifferentCheckpointCallsAllFailAlike) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("distribute_mw_calls_" + std::to_string(::getpid()));
  StrategyScope scope = s.scope();
  Variable w(Tensor::from_vector<float>({1, 2}, {2}, Device::cpu()), {.name = "w"});
  Variable b(0.5f, {.name = "b"});
  std::vector<int> savers;
  for (int v = 0; v < workers(); ++v) {
    if (v != 1) savers.push_back(v);
  }
  const auto expect_disagreement = [&](const std::function<void()>& call, const std::string& saving,
                                       const std::string& restoring) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_THAT(e.what(), HasSubstr(": " + workers_text(savers) + " called " + saving + " of 'w', 'b' where " +
                                      workers_text(1, 1) + " called " + restoring +
                                      " of 'w', 'b'; every worker must make the same checkpoint calls, of the same "
                                      "entries, in the same order"));
      EXPECT_THAT(e.what(), ::testing::StartsWith("checkpoint #"));
    }
  };
  const fs::path file = dir / "by_hand.safetensors";
  if (worker() == 0) fs::create_directories(dir);
  expect_disagreement(
      [&] {
        Checkpoint checkpoint({{"w", w}, {"b", b}});
        worker() == 1 ? checkpoint.restore(file) : checkpoint.save(file);
      },
      "Checkpoint::save", "Checkpoint::restore");
  if (worker() == 0) EXPECT_FALSE(fs::exists(file)) << "the chief wrote before the workers agreed";
  CheckpointManager manager(Checkpoint({{"w", w}, {"b", b}}), dir / "managed");
  expect_disagreement([&] { worker() == 1 ? (void)manager.restore_or_initialize() : (void)manager.save(); },
                      "CheckpointManager::save", "CheckpointManager::restore_or_initialize");
  EXPECT_EQ(manager.latest_checkpoint(), std::nullopt);
  expect_still_usable();
  if (worker() == 0) fs::remove_all(dir);
}

// Worker 1's replicas pass float32[12], the others float32[10].
TEST_F(MultiWorker, ShapeMismatchOnOneWorkerNamesItOnEveryWorker) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int w = worker();
  try {
    s.run([w] {
      get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{w == 1 ? 12 : 10}));
    });
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("all_reduce #1: " + workers_text(1, 1)));
    EXPECT_THAT(e.what(), HasSubstr(") passed float32[12], worker"));
    EXPECT_THAT(e.what(), HasSubstr(") passed float32[10]"));
    if (workers() == 2 && local() == 2) {
      EXPECT_EQ(e.what(), "all_reduce #1: " + workers_text(1, 1) + " passed float32[12], " + workers_text(0, 0) +
                              " passed float32[10]; every worker's replicas must pass the same kind of value");
    }
  }
  // The strategy stays usable.
  PerReplica<float> sum = s.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  EXPECT_EQ(sum[0], static_cast<float>(n()));
}

TEST_F(MultiWorker, DifferentCollectivesOnOneWorkerAreAFailedPrecondition) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int w = worker();
  try {
    s.run([w] {
      ReplicaContext& ctx = *get_replica_context();
      if (w == 1) {
        ctx.all_gather(Tensor::zeros(DType::kFloat32, Shape{1}), 0);
      } else {
        ctx.all_reduce(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{1}));
      }
    });
    ADD_FAILURE() << "no error";
  } catch (const FailedPreconditionError& e) {
    EXPECT_THAT(e.what(), HasSubstr(workers_text(1, 1)));
    EXPECT_THAT(e.what(), HasSubstr(") called all_gather where worker"));
    EXPECT_THAT(e.what(), HasSubstr(") called all_reduce (collective #1). Every worker must make the same collective "
                                    "calls in the same order."));
  }
  expect_still_usable();
}

TEST_F(MultiWorker, ReplicaRaisingOnOneWorkerReleasesEveryWorker) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int w = worker();
  const int last = 2 * local() - 1;  // worker 1's last replica
  try {
    s.run([w] {
      ReplicaContext& ctx = *get_replica_context();
      if (w == 1 && ctx.local_replica_id() == get_strategy().extended().num_local_replicas() - 1) {
        throw std::runtime_error("boom");
      }
      ctx.all_reduce(ReduceOp::kSum, 1.0f);
    });
    ADD_FAILURE() << "no error";
  } catch (const AbortedError& e) {
    EXPECT_NE(w, 1);
    EXPECT_STREQ(e.what(), ("worker 1 (replica " + std::to_string(last) +
                            ") raised: boom; the other workers were released from their collectives")
                               .c_str());
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(w, 1);
    EXPECT_STREQ(e.what(), "boom");
  }
  expect_still_usable();
}

// A run that fails through a replica's exception, then one that fails on worker 1 with no replica
// to blame (its replicas' own timeout): the second report names the worker and all its replicas,
// not the first run's replica.
TEST_F(MultiWorker, AFailureWithoutAReplicaDoesNotNameThePreviousRunsReplica) {
  if (workers() < 2 || local() < 2) GTEST_SKIP() << "needs two workers of two replicas";
  const int w = worker();
  EXPECT_ANY_THROW(s.run([w] {
    ReplicaContext& ctx = *get_replica_context();
    if (w == 1 && ctx.local_replica_id() == 1) throw std::runtime_error("boom");
    ctx.all_reduce(ReduceOp::kSum, 1.0f);
  }));
  try {
    s.run([w] {
      ReplicaContext& ctx = *get_replica_context();
      if (w != 1) {
        ctx.all_reduce(ReduceOp::kSum, 1.0f);
      } else if (ctx.local_replica_id() == 0) {
        ctx.all_reduce(ReduceOp::kSum, 1.0f, CommunicationOptions{.timeout = std::chrono::milliseconds(300)});
      } else {
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    });
    ADD_FAILURE() << "no error";
  } catch (const DeadlineExceededError& e) {
    const std::string late = std::to_string(2 * local() - 1);
    const std::string waiting = std::to_string(local());
    const std::string local_message = "timed out after 0.3 s: replica " + late + " did not arrive while replica " +
                                      waiting + " waits in all_reduce #1";
    EXPECT_THAT(e.what(), HasSubstr(w == 1 ? local_message : workers_text(1, 1) + ": " + local_message));
  } catch (const AbortedError& e) {
    ADD_FAILURE() << "the timeout was not the run's error: " << e.what();
  }
  expect_still_usable();
}

// merge_fn raises on worker 1 while worker 0's merge_fn is in a cross-replica reduce.
TEST_F(MultiWorker, MergeFnRaisingOnOneWorkerReleasesTheOthersMidReduce) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int w = worker();
  try {
    s.run([w] {
      get_replica_context()->merge_call(
          [w](Strategy& strategy, const PerReplica<float>& values) {
            if (w == 1) throw std::runtime_error("merge boom");
            return strategy.reduce(ReduceOp::kSum, values, std::nullopt);
          },
          1.0f);
    });
    ADD_FAILURE() << "no error";
  } catch (const AbortedError& e) {
    EXPECT_NE(w, 1);
    // No replica to blame: the worker and all its replicas are named.
    EXPECT_EQ(e.what(), workers_text(1, 1) + " raised: merge boom; the other workers were released from their "
                                             "collectives");
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(w, 1);
    EXPECT_STREQ(e.what(), "merge boom");
  }
  // Every worker knows the run ended: the next one starts in step.
  expect_still_usable();
  EXPECT_EQ(s.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 2); })[0], 2 * n());
}

// A run nested in a merge_fn concludes on its own: a replica that raises after it, in the outer
// run, still reaches the other workers at once (they do not wait for a timeout).
TEST_F(MultiWorker, AFailureAfterANestedRunReachesTheOtherWorkersAtOnce) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int last = workers() - 1;
  const bool raises = worker() == last;
  const auto start = std::chrono::steady_clock::now();
  try {
    s.run([raises] {
      get_replica_context()->merge_call([](Strategy& strategy) {
        strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
      });
      if (raises) throw std::runtime_error("boom after a nested run");
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
    });
    ADD_FAILURE() << "no error";
  } catch (const AbortedError& e) {
    EXPECT_FALSE(raises);
    EXPECT_THAT(e.what(), ::testing::StartsWith("worker " + std::to_string(last) + " (replica "));
    EXPECT_THAT(e.what(), HasSubstr(") raised: boom after a nested run; the other workers were released"));
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(raises);
    EXPECT_STREQ(e.what(), "boom after a nested run");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  expect_still_usable();
}

// Worker 1 arrives at a collective after the others gave up on it (their timeout passed): it is
// told so, with DeadlineExceededError naming them, and never starts the data phase alone; the job
// goes on (no MPI_Abort) and the strategy is unusable on every worker.
TEST_F(MultiWorker, AWorkerArrivingAfterTheOthersGaveUpIsToldSo) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.communication.timeout = std::chrono::seconds(1);
  MultiWorkerMirroredStrategy job(options);
  job.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  const bool late = worker() == 1;
  std::vector<int> others;
  for (int w = 0; w < workers(); ++w) {
    if (w != 1) others.push_back(w);
  }
  try {
    job.run([late] {
      if (late) std::this_thread::sleep_for(std::chrono::seconds(3));
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
    });
    ADD_FAILURE() << "no error";
  } catch (const DeadlineExceededError& e) {
    if (late) {
      EXPECT_THAT(e.what(), HasSubstr(workers_text(others)));
      EXPECT_THAT(e.what(), HasSubstr(") gave up waiting in all_reduce #1 when "));
      EXPECT_THAT(e.what(), HasSubstr(" timeout passed, before " + workers_text(1, 1) +
                                      " arrived in all_reduce #1; the collective was abandoned"));
    } else {
      EXPECT_THAT(e.what(), HasSubstr("timed out after 1 s: " + workers_text(1, 1) + " did not arrive"));
    }
  }
  try {
    job.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    ADD_FAILURE() << "no error";
  } catch (const UnavailableError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the workers' collectives are unusable after an earlier failure"));
  }
  expect_still_usable();
}

TEST_F(MultiWorker, EarlyReturnOnOneWorkerNamesIt) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int w = worker();
  try {
    s.run([w] {
      if (w == 0) return;
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
    });
    ADD_FAILURE() << "no error";
  } catch (const FailedPreconditionError& e) {
    EXPECT_THAT(e.what(), HasSubstr(workers_text(0, 0)));
    EXPECT_THAT(e.what(), HasSubstr(") returned from the replica function while worker"));
    EXPECT_THAT(e.what(), HasSubstr(" in all_reduce (collective #1)"));
  }
  expect_still_usable();
}

TEST_F(MultiWorker, WorkerDestroyingItsStrategyReleasesTheOthers) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  auto doomed = std::make_unique<MultiWorkerMirroredStrategy>(options);
  if (worker() != 0) {
    doomed.reset();  // while worker 0 waits in a collective of it
    return;
  }
  try {
    doomed->run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    ADD_FAILURE() << "no error";
  } catch (const UnavailableError& e) {
    EXPECT_STREQ(e.what(), (workers_text(1, workers() - 1) + " destroyed its strategy while " + workers_text(0, 0) +
                            " waits in all_reduce #1; every worker must make the same calls before destroying its "
                            "strategy")
                               .c_str());
  }
  // Unusable from then on.
  EXPECT_THROW(doomed->run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); }), UnavailableError);
}

// A worker that destroys its strategy tells the others without waiting for them to hear it; when
// they destroyed theirs first, that last word is still on its way, and must not be taken for a
// word of the next strategy the workers build.
TEST_F(MultiWorker, ANewStrategyIsNotToldThatTheWorkersLeftTheOldOne) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.communication.timeout = std::chrono::seconds(20);
  for (int round = 0; round < 3; ++round) {
    auto old_strategy = std::make_unique<MultiWorkerMirroredStrategy>(options);
    if (worker() == 0) old_strategy.reset();
    expect_still_usable();  // worker 0's is gone before the others destroy theirs
    old_strategy.reset();
    expect_still_usable();
    MultiWorkerMirroredStrategy next(options);
    EXPECT_EQ(next.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1); })[0], n());
  }
}

TEST_F(MultiWorker, DifferentLocalReplicaCountsAreAnInvalidArgumentOnEveryWorker) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  if (g_device_type == "GPU:" && g_first_gpu + local() >= num_physical_gpus()) {
    GTEST_SKIP() << "needs a GPU more than the replicas of worker 0 use";
  }
  // Worker 0 brings one replica more than the others; every worker learns it at construction, in
  // the same words.
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  if (worker() == 0) options.local_devices.push_back(local_device(local()));
  std::string others = workers() == 2 ? "worker 1 has " : "workers 1";
  for (int w = 2; w < workers(); ++w) others += ", " + std::to_string(w);
  if (workers() > 2) others += " have ";
  try {
    MultiWorkerMirroredStrategy uneven(options);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.what(), "MultiWorkerMirroredStrategy: worker 0 has " + std::to_string(local() + 1) +
                            " local replicas, " + others + std::to_string(local()) +
                            "; every worker needs the same number of local devices");
  }
  expect_still_usable();
}

TEST_F(MultiWorker, WorkersSharingAGpuOfOneHostAreAnInvalidArgument) {
  if (g_device_type != "GPU:" || workers() < 2) GTEST_SKIP() << "needs two workers on GPUs";
  const char* host_id = std::getenv("NCCL_HOSTID");
  if (host_id == nullptr) GTEST_SKIP() << "the workers have GPUs of their own";
  // Without the host ids this binary gives them, the workers share a host and its GPU.
  const std::string saved = host_id;
  unsetenv("NCCL_HOSTID");
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  try {
    MultiWorkerMirroredStrategy shared(options);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), ::testing::MatchesRegex(
                              "MultiWorkerMirroredStrategy: workers 0 and 1 run on host .+ and both list the GPU at PCI "
                              ".+ \\(their replicas 0 and " + std::to_string(local()) + "\\); NCCL needs one GPU per "
                              "replica: give each worker its own GPUs \\(local_devices, or CUDA_VISIBLE_DEVICES set "
                              "per rank\\)"));
  }
  setenv("NCCL_HOSTID", saved.c_str(), 1);
  expect_still_usable();
}

// A resolver that lists one worker more than mpirun launched.
class OneTaskTooMany : public ClusterResolver {
 public:
  explicit OneTaskTooMany(int workers) : workers_(workers) {}
  ClusterSpec cluster_spec() const override {
    return ClusterSpec({{"worker", std::vector<std::string>(static_cast<std::size_t>(workers_) + 1, "localhost")}});
  }
  std::string task_type() const override { return "worker"; }
  int task_id() const override { return 0; }

 private:
  int workers_;
};

TEST_F(MultiWorker, ResolverListingOtherTasksThanLaunchedIsAnInvalidArgument) {
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.cluster_resolver = std::make_shared<OneTaskTooMany>(workers());
  try {
    MultiWorkerMirroredStrategy mismatched(options);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(std::string(e.what()), "MultiWorkerMirroredStrategy: the cluster resolver lists " +
                                         std::to_string(workers() + 1) + " tasks but MPI launched " +
                                         std::to_string(workers()) + " processes; launch one process per task");
  }
}

// Strategies built and destroyed in a loop make no more MPI communicators after the first: the
// next communicator gets the handle it would have got before the 200 others (Open MPI hands out
// the lowest free slot of its table; 400 leaked communicators would push it up by 400). Each
// strategy works, although it reuses the last one's communicators, whose messages still on their
// way are not taken for its own.
TEST_F(MultiWorker, StrategiesBuiltInALoopFreeTheirCommunicators) {
  const auto next_handle = [] {
    MPI_Comm comm = MPI_COMM_NULL;
    EXPECT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
    const MPI_Fint handle = MPI_Comm_c2f(comm);
    MPI_Comm_free(&comm);
    return handle;
  };
  // CPU replicas whatever --device says: the MPI communicators are the point, and 200 NCCL
  // communicators across the workers would take minutes.
  MultiWorkerMirroredStrategyOptions options;
  for (int l = 0; l < local(); ++l) options.local_devices.push_back("CPU:" + std::to_string(l));
  const auto build_and_run = [&](int i) {
    MultiWorkerMirroredStrategy loop(options);
    PerReplica<float> sum = loop.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    EXPECT_EQ(sum[0], static_cast<float>(n())) << "strategy " << i;
  };
  build_and_run(0);  // may make the communicators the next ones use
  const MPI_Fint before = next_handle();
  for (int i = 1; i <= 200; ++i) build_and_run(i);
  EXPECT_EQ(next_handle(), before);
  expect_still_usable();
}

// A resolver that lists the right tasks but names another task as this process.
class WrongTaskId : public ClusterResolver {
 public:
  WrongTaskId(int workers, int task) : workers_(workers), task_(task) {}
  ClusterSpec cluster_spec() const override {
    return ClusterSpec({{"worker", std::vector<std::string>(static_cast<std::size_t>(workers_), "localhost")}});
  }
  std::string task_type() const override { return "worker"; }
  int task_id() const override { return task_; }

 private:
  int workers_;
  int task_;
};

// Constructs a strategy with `resolver` on every worker and checks that each throws
// InvalidArgumentError with `message` (before any exchange, so no worker waits for another).
void expect_resolver_refused(std::shared_ptr<const ClusterResolver> resolver, const std::string& message) {
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.cluster_resolver = std::move(resolver);
  try {
    MultiWorkerMirroredStrategy refused(options);
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST_F(MultiWorker, ResolverNamingAnotherTaskThanTheRankIsAnInvalidArgument) {
  // A task id past the job's tasks.
  const std::string task = "(\"worker\", " + std::to_string(worker() + workers()) + ")";
  expect_resolver_refused(std::make_shared<WrongTaskId>(workers(), worker() + workers()),
                          "MultiWorkerMirroredStrategy: the cluster resolver says this process is task " + task +
                              " but the cluster spec lists " + std::to_string(workers()) + " \"worker\" task" +
                              (workers() == 1 ? "" : "s") + " (task ids 0 to " + std::to_string(workers() - 1) +
                              "); a resolver's task_id() is an index into its job's tasks");
  // A task of the job whose worker is another process's rank.
  if (workers() > 1) {
    const int other = (worker() + 1) % workers();
    expect_resolver_refused(
        std::make_shared<WrongTaskId>(workers(), other),
        "MultiWorkerMirroredStrategy: the cluster resolver says this process is task (\"worker\", " +
            std::to_string(other) + "), which is worker " + std::to_string(other) + " of the collective group (the "
            "chief is worker 0, then the \"worker\" tasks in task id order), but it is worker " +
            std::to_string(worker()) + " (its rank among the " + std::to_string(workers()) + " MPI processes that "
            "are the workers); give each process the task whose worker is its rank");
  }
  expect_still_usable();
}

// A cluster spec's jobs and their tasks' addresses.
using Jobs = std::map<std::string, std::vector<std::string>>;

// A resolver of the given spec that names the given task as this process.
class GivenTask : public ClusterResolver {
 public:
  GivenTask(ClusterSpec spec, std::string task_type, int task_id)
      : spec_(std::move(spec)), task_type_(std::move(task_type)), task_id_(task_id) {}
  ClusterSpec cluster_spec() const override { return spec_; }
  std::string task_type() const override { return task_type_; }
  int task_id() const override { return task_id_; }

 private:
  ClusterSpec spec_;
  std::string task_type_;
  int task_id_;
};

// TF's layout with a chief: {"chief": [host0], "worker": [host1, ...]} for `workers` workers,
// with `extra` jobs beside.
ClusterSpec chief_layout(int workers, Jobs extra = {}) {
  extra["chief"] = {"host0"};
  for (int w = 1; w < workers; ++w) extra["worker"].push_back("host" + std::to_string(w));
  return ClusterSpec(std::move(extra));
}

// The task TF's numbering gives worker w of the chief layout: the chief, then the "worker" tasks.
std::shared_ptr<const ClusterResolver> chief_layout_task(int workers, int w,
                                                         Jobs extra = {}) {
  return std::make_shared<GivenTask>(chief_layout(workers, std::move(extra)), w == 0 ? "chief" : "worker",
                                     w == 0 ? 0 : w - 1);
}

TEST_F(MultiWorker, AClusterWithAChiefHasTheChiefAsWorkerZeroThenTheWorkersInOrder) {
  const auto check_strategy = [&](std::shared_ptr<const ClusterResolver> resolver) {
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = local_devices();
    options.cluster_resolver = std::move(resolver);
    MultiWorkerMirroredStrategy with_chief(options);
    EXPECT_EQ(with_chief.extended().worker_id(), worker());
    EXPECT_EQ(with_chief.extended().num_workers(), workers());
    EXPECT_EQ(with_chief.extended().should_checkpoint(), worker() == 0);  // TF's is_chief
    EXPECT_EQ(with_chief.cluster_resolver().task_type(), worker() == 0 ? "chief" : "worker");
    const PerReplica<int> ids = with_chief.run([] {
      ReplicaContext& ctx = *get_replica_context();
      return ctx.all_reduce(ReduceOp::kSum, ctx.replica_id_in_sync_group());
    });
    for (int l = 0; l < local(); ++l) EXPECT_EQ(ids[l], n() * (n() - 1) / 2);
  };
  check_strategy(chief_layout_task(workers(), worker()));
  // Evaluator and parameter-server tasks may be listed; they are no workers.
  check_strategy(chief_layout_task(workers(), worker(), {{"evaluator", {"eval0"}}, {"ps", {"ps0", "ps1"}}}));
  expect_still_usable();
}

TEST_F(MultiWorker, TasksThatTfPlacesNowhereInTheCollectiveGroupAreInvalidArguments) {
  const std::string prefix = "MultiWorkerMirroredStrategy: the cluster resolver says this process is task ";
  const Jobs others = {{"evaluator", {"eval0"}}, {"ps", {"ps0"}}};
  expect_resolver_refused(std::make_shared<GivenTask>(chief_layout(workers(), others), "ps", 0),
                          prefix + "(\"ps\", 0), but only \"chief\" and \"worker\" tasks are workers of the "
                          "collective group; a parameter server has no place in it (every worker keeps its own copy "
                          "of the variables): construct the strategy in the chief and worker tasks only");
  expect_resolver_refused(std::make_shared<GivenTask>(chief_layout(workers(), others), "evaluator", 0),
                          prefix + "(\"evaluator\", 0), but only \"chief\" and \"worker\" tasks are workers of "
                          "the collective group; an evaluator runs outside the collective group, as in TF: give it a "
                          "strategy of its own (MirroredStrategy or OneDeviceStrategy) instead of a "
                          "MultiWorkerMirroredStrategy");
  expect_resolver_refused(std::make_shared<GivenTask>(chief_layout(workers()), "master", 0),
                          prefix + "(\"master\", 0), but only \"chief\" and \"worker\" tasks are workers of the "
                          "collective group; the task types are \"chief\" (worker 0) and \"worker\" (the others), "
                          "beside \"evaluator\" and \"ps\" tasks, which are no workers");
  // Two chiefs.
  expect_resolver_refused(std::make_shared<GivenTask>(ClusterSpec(Jobs{{"chief", {"host0", "host1"}}}), "chief", 0),
                          "MultiWorkerMirroredStrategy: the cluster spec lists 2 \"chief\" tasks; a cluster has at "
                          "most one chief (worker 0 of the collective group): list the others under \"worker\"");
  // A task id outside its job: the chief's, and one below 0.
  expect_resolver_refused(std::make_shared<GivenTask>(chief_layout(workers()), "chief", 1),
                          prefix + "(\"chief\", 1) but the cluster spec lists 1 \"chief\" task (task ids 0 to "
                          "0); a resolver's task_id() is an index into its job's tasks");
  expect_resolver_refused(std::make_shared<GivenTask>(ClusterSpec(Jobs{{"chief", {"host0"}}}), "worker", -1),
                          prefix + "(\"worker\", -1) but the cluster spec lists no \"worker\" task; a resolver's "
                          "task_id() is an index into its job's tasks");
  // A job TF does not know.
  expect_resolver_refused(std::make_shared<GivenTask>(chief_layout(workers(), {{"trainer", {"t0"}}}), "chief", 0),
                          "MultiWorkerMirroredStrategy: the cluster spec has a job \"trainer\", which is no task "
                          "type of a cluster (TF knows \"chief\", \"worker\", \"evaluator\" and \"ps\"); list the "
                          "workers under \"chief\" (at most one, worker 0) and \"worker\"");
  // Each process names the task of the next rank.
  if (workers() > 1) {
    const int other = (worker() + 1) % workers();
    const std::string task = other == 0 ? "(\"chief\", 0)" : "(\"worker\", " + std::to_string(other - 1) + ")";
    expect_resolver_refused(chief_layout_task(workers(), other),
                            prefix + task + ", which is worker " + std::to_string(other) + " of the collective "
                            "group (the chief is worker 0, then the \"worker\" tasks in task id order), but it is "
                            "worker " + std::to_string(worker()) + " (its rank among the " +
                            std::to_string(workers()) + " MPI processes that are the workers); give each process "
                            "the task whose worker is its rank");
  }
  expect_still_usable();
}

TEST_F(MultiWorker, StrategiesOnSubCommunicatorsHaveTheirRanksAsWorkers) {
  // Even and odd ranks form two jobs that run side by side (one job with a single process).
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm half = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half), MPI_SUCCESS);
  const int size = rank % 2 == 0 ? (workers() + 1) / 2 : workers() / 2;
  {
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = local_devices();
    options.communication.timeout = std::chrono::seconds(20);
    options.cluster_resolver = mpi_cluster_resolver(half);
    MultiWorkerMirroredStrategy sub(options);
    EXPECT_EQ(sub.extended().num_workers(), size);
    EXPECT_EQ(sub.extended().worker_id(), rank / 2);
    EXPECT_EQ(sub.cluster_resolver().task_id(), rank / 2);
    EXPECT_EQ(sub.cluster_resolver().cluster_spec().num_tasks("worker"), size);
    EXPECT_EQ(sub.num_replicas_in_sync(), size * local());
    PerReplica<float> sum = sub.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    EXPECT_EQ(sum.values(), std::vector<float>(static_cast<std::size_t>(local()), static_cast<float>(size * local())));
    PerReplica<int> ids = sub.run([] { return get_replica_context()->replica_id_in_sync_group(); });
    std::vector<int> expected_ids(static_cast<std::size_t>(local()));
    std::iota(expected_ids.begin(), expected_ids.end(), rank / 2 * local());
    EXPECT_EQ(sub.experimental_local_results(ids), expected_ids);
  }
  MPI_Comm_free(&half);
  expect_still_usable();
}

TEST_F(MultiWorker, AStalledCollectiveActionOutOfTheEnumIsAnInvalidArgument) {
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.on_stalled_collective = static_cast<StalledCollectiveAction>(2);
  try {
    MultiWorkerMirroredStrategy invalid(options);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(std::string(e.what()), "MultiWorkerMirroredStrategy: options.on_stalled_collective is 2, which is no "
                                     "StalledCollectiveAction (kEndJob or kFailStrategy)");
  }
  expect_still_usable();
}

// Only the last worker's options are invalid: it throws its own error, and the others, which
// would otherwise wait for it in the construction's collective steps, are told of it at once.
TEST_F(MultiWorker, AWorkerWhoseOptionsAreInvalidFailsEveryWorkersConstruction) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int last = workers() - 1;
  const std::string stall_error = "MultiWorkerMirroredStrategy: options.on_stalled_collective is 2, which is no "
                                  "StalledCollectiveAction (kEndJob or kFailStrategy)";
  const std::string timeout_error = "MultiWorkerMirroredStrategy: options.communication.timeout is -1 s";
  for (const bool bad_timeout : {false, true}) {
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = local_devices();
    if (worker() == last) {
      if (bad_timeout) {
        options.communication.timeout = std::chrono::seconds(-1);
      } else {
        options.on_stalled_collective = static_cast<StalledCollectiveAction>(2);
      }
    }
    try {
      MultiWorkerMirroredStrategy invalid(options);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      const std::string own = bad_timeout ? timeout_error : stall_error;
      if (worker() == last) {
        EXPECT_THAT(e.what(), ::testing::StartsWith(own));
      } else {
        EXPECT_THAT(e.what(), ::testing::StartsWith("worker " + std::to_string(last) +
                                                    " could not construct its strategy: " + own));
      }
    }
  }
  expect_still_usable();
}

// With kFailStrategy every data phase crosses the workers in the transport's own buffers (an
// abandoned request must never reach the caller's): the results are those of kEndJob, for each
// way the data goes (MPI_Iallreduce, the ring in several pieces, float16 widened, an uneven
// MPI_Iallgatherv, MPI_Ibcast for ONLY_FIRST_REPLICA).
TEST_F(MultiWorker, FailStrategyModeGivesTheSameResults) {
  MultiWorkerMirroredStrategyOptions options;
  for (int l = 0; l < local(); ++l) options.local_devices.push_back("CPU:" + std::to_string(l));
  options.communication.timeout = std::chrono::seconds(60);
  options.on_stalled_collective = StalledCollectiveAction::kFailStrategy;
  MultiWorkerMirroredStrategy failing(options);
  constexpr std::int64_t kLarge = (std::int64_t{16} << 20) / 4 + 1000;
  auto reduced = failing.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int g = ctx.replica_id_in_sync_group();
    std::vector<float> large(kLarge, 1.0f);
    large.back() = static_cast<float>(g);
    std::vector<Tensor> leaves{Tensor::from_vector<std::int64_t>({g, 1}, Shape{2}),
                               Tensor::from_vector<float>(large, Shape{kLarge}),
                               Tensor::from_vector<Half>({Half(static_cast<float>(g)), Half(0.5f)}, Shape{2})};
    return ctx.all_reduce(ReduceOp::kSum, leaves);
  });
  PerReplica<Tensor> gathered = failing.run([] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    return get_replica_context()->all_gather(
        Tensor::from_vector<std::int32_t>(std::vector<std::int32_t>(2 * (g + 1), g), Shape{g + 1, 2}), 0);
  });
  Variable first;
  {
    StrategyScope scope = failing.scope();
    first = Variable(0.0f, {.name = "first", .aggregation = VariableAggregation::kOnlyFirstReplica});
  }
  failing.run([&] {
    first.assign(Tensor::scalar(static_cast<float>(get_replica_context()->replica_id_in_sync_group() + 5)));
  });
  const std::int64_t ids = n() * (n() - 1) / 2;
  std::vector<std::int32_t> expected_gather;
  for (int g = 0; g < n(); ++g) expected_gather.insert(expected_gather.end(), static_cast<std::size_t>(2 * (g + 1)), g);
  for (int l = 0; l < local(); ++l) {
    const std::vector<Tensor>& leaves = reduced[l];
    EXPECT_EQ(leaves[0].to_vector<std::int64_t>(), (std::vector<std::int64_t>{ids, n()}));
    const std::vector<float> large = leaves[1].to_vector<float>();
    EXPECT_EQ(large.front(), static_cast<float>(n()));
    EXPECT_EQ(large[large.size() / 2], static_cast<float>(n()));
    EXPECT_EQ(large.back(), static_cast<float>(ids));
    EXPECT_EQ(leaves[2].to_vector<Half>(),
              (std::vector<Half>{Half(static_cast<float>(ids)), Half(0.5f * static_cast<float>(n()))}));
    EXPECT_EQ(gathered[l].to_vector<std::int32_t>(), expected_gather);
  }
  for (const Tensor& c : failing.experimental_local_results(first)) EXPECT_EQ(c.item<float>(), 5.0f);
  expect_still_usable();
}

TEST(MpiClusterResolver, NullCommunicatorIsAnInvalidArgument) {
  strategy();  // MPI is up
  try {
    mpi_cluster_resolver(MPI_COMM_NULL);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(std::string(e.what()),
              "MpiClusterResolver: the communicator is MPI_COMM_NULL; only the processes that are its ranks "
              "(MPI_Comm_split gave the others MPI_COMM_NULL) can be its workers");
  }
}

TEST_F(MultiWorker, WorkerThatDoesNotArriveTimesOutThenTheStrategyIsUnavailable) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.communication.timeout = std::chrono::milliseconds(500);
  MultiWorkerMirroredStrategy timed(options);
  // The others wait for worker 0 in the binary's strategy, keeping `timed` alive (destroying it
  // would release worker 0 at once) but never calling its collective.
  const auto meet = [this] { s.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); }); };
  if (worker() != 0) {
    meet();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    timed.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    ADD_FAILURE() << "no error";
  } catch (const DeadlineExceededError& e) {
    EXPECT_STREQ(e.what(), ("timed out after 0.5 s: " + workers_text(1, workers() - 1) + " did not arrive while " +
                            workers_text(0, 0) + " waits in all_reduce #1; a worker is stuck, slow or skipped the collective")
                               .c_str());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  try {
    timed.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    ADD_FAILURE() << "no error";
  } catch (const UnavailableError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unusable after an earlier failure"));
  }
  meet();
}

#if DISTRIBUTE_HAS_CUDA
// `fn` must throw E, with a message that matches `pattern`.
template <class E, class Fn>
void expect_error(Fn&& fn, const std::string& pattern) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    EXPECT_THAT(e.what(), ::testing::ContainsRegex(pattern));
  }
}

// Last of the binary: it leaves a strategy of its own unusable. Worker 1's stream sleeps for 2 s
// before its NCCL all_reduce, so worker 0's cannot finish within its 1 s timeout; worker 1's own
// timeout is 5 s. Which wait passes its timeout first depends on NCCL (the communicator's first
// collective also connects the workers): the device work that did not finish, NCCL not taking the
// all_reduce, or the other worker not arriving at the end of the run. Every worker gets a
// DeadlineExceededError within seconds, and then UnavailableError from that strategy, as its
// communicator across the workers cannot be rebuilt by one worker; the binary's strategy goes on.
TEST_F(MultiWorker, GpuDataPhasePastTheTimeoutLeavesTheStrategyUnavailable) {
  if (g_device_type != "GPU:" || workers() != 2) GTEST_SKIP() << "needs two workers on GPUs";
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.communication.timeout = std::chrono::seconds(worker() == 0 ? 1 : 5);
  MultiWorkerMirroredStrategy stalled(options);
  const bool sleeps = worker() == 1;
  const auto step = [sleeps]() -> Tensor {
    if (sleeps) {
      const auto sleep = [](void*) { std::this_thread::sleep_for(std::chrono::seconds(2)); };
      EXPECT_EQ(cudaLaunchHostFunc(cuda::current_stream(), sleep, nullptr), cudaSuccess);
    }
    return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::from_vector<float>({1.0f}));
  };
  const auto start = std::chrono::steady_clock::now();
  expect_error<DeadlineExceededError>([&] { stalled.run(step); },
                                      "did not finish; its collectives were aborted|NCCL did not take all_reduce #1 "
                                      "within [15] s|did not arrive while");
  expect_error<UnavailableError>([&] { stalled.run(step); },
                                 "the NCCL communicator spanning the workers was aborted|collectives are unusable "
                                 "after an earlier failure");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  expect_still_usable();
}
#endif

}  // namespace
}  // namespace distribute

// Places this worker's replicas on GPUs: its own GPUs when the machine has enough for every
// worker, else the same GPUs as the other workers of this machine, each worker then presenting
// itself to NCCL as a host of its own (NCCL refuses two ranks on one GPU of one host), so that
// NCCL joins them through its network transport as it joins workers on separate machines.
// Returns false, with the reason, where that cannot be done.
bool place_on_gpus(std::string& why_not) {
  using distribute::g_local_replicas;
  const int gpus = distribute::num_physical_gpus();
  if (gpus == 0) {
    why_not = "no GPU visible: " + distribute::gpu_unavailable_reason();
    return false;
  }
  if (gpus < g_local_replicas) {
    why_not = "needs " + std::to_string(g_local_replicas) + " GPUs per worker, " + std::to_string(gpus) + " visible";
    return false;
  }
  const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int rank = local_rank != nullptr ? std::atoi(local_rank) : 0;
  const int size = local_size != nullptr ? std::atoi(local_size) : 1;
  distribute::g_device_type = "GPU:";
  if (gpus >= size * g_local_replicas) {
    distribute::g_first_gpu = rank * g_local_replicas;
  } else {
    setenv("NCCL_HOSTID", ("distribute-test-worker-" + std::to_string(rank)).c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  }
  return true;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  bool gpu = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--local_replicas=", 0) == 0) distribute::g_local_replicas = std::stoi(arg.substr(17));
    if (arg == "--device=gpu") gpu = true;
  }
  std::string why_not;
  if (gpu && !place_on_gpus(why_not)) {
    std::printf("skipped: %s\n", why_not.c_str());
    return 77;
  }
  distribute::strategy();  // initialises MPI
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(host, &length);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
  for (int r = 0; r < size; ++r) {
    distribute::g_hosts.emplace_back(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  }
  return RUN_ALL_TESTS();
}
