// MultiWorkerMirroredStrategy across real processes: ctest launches this binary under
// `mpirun -np W` with `--local_replicas=L` (2x2, 3x1, 4x1, 1x2), and again as W plain processes
// over Gloo (tests/launch_workers.sh: the multi_worker_gloo_* tests), and every process checks the
// same expectations from its own side: global replica ids, the values of TF's test cases
// generalised to W x L (for 2 x 2: SUM of 1.0 is 4.0, SUM of ids 6, [1,2,3,4][g] sums to 10 and
// averages 2.5, all_gather of (1,2,2) gives (4,2,2), (1,8,2), (1,2,8)), merge_call once per worker,
// Strategy::reduce with uneven batches (an exact MEAN), gather, reduce_to, batch_reduce_to; and the
// errors that name the worker and replicas when workers differ, raise or return early, after which
// the strategy stays usable; workers with different local replica counts get InvalidArgumentError
// at construction; a worker that does not arrive gives DeadlineExceededError and then
// UnavailableError; strategies on sub-communicators have their ranks as workers; a strategy whose
// stalled data phases fail it (StalledCollectiveAction::kFailStrategy) gives the same results; the
// straggler figures count the step across the workers apart from the replicas' waits.
// Distributed input whose workers' pipelines end at different steps runs the same steps on every
// worker, the workers without data giving their replicas empty batches, under each input policy;
// and its errors come alike on every worker.
//
// With `--device=gpu` every worker's replicas are GPUs, joined by one NCCL communicator spanning
// the workers, and every test runs the same way on them (ctest's multi_worker_gpu_*; they skip,
// exit code 77, where no GPU is visible).
//
// The tests are in this file and in multi_worker_test_<subject>.cc, which register after it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/mpi/mpi_cluster_resolver.h"
#include "multi_worker_test.h"

namespace distribute::testing {

int g_local_replicas = 2;
std::string g_device_type = "CPU:";
int g_first_gpu = 0;
std::vector<std::string> g_hosts;

std::string local_device(int l) {
  return g_device_type + std::to_string((g_device_type == "GPU:" ? g_first_gpu : 0) + l);
}

std::vector<std::string> local_devices() {
  std::vector<std::string> devices;
  for (int l = 0; l < g_local_replicas; ++l) devices.push_back(local_device(l));
  return devices;
}

MultiWorkerMirroredStrategy& strategy() {
  static MultiWorkerMirroredStrategy* s = [] {
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = local_devices();
    options.communication.timeout = std::chrono::seconds(20);
    return new MultiWorkerMirroredStrategy(options);
  }();
  return *s;
}

}  // namespace distribute::testing

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::g_local_replicas;
using testing::MultiWorker;
using testing::strategy;

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

// Collectives issued without waiting give the blocking calls' results across workers, whatever
// order their handles are waited in, with a blocking call between them; compressed ones too. (On
// GPUs they run on each replica's communication stream.)
TEST_F(MultiWorker, AsyncCollectivesGiveTheBlockingResults) {
  const auto values = [](int g) {
    std::vector<float> v(1000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(g + 1) * 0.5f + static_cast<float>(i % 13);
    return v;
  };
  const auto blocking = s.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const Tensor x = Tensor::from_vector<float>(values(ctx.replica_id_in_sync_group()));
    const CommunicationOptions bf16{.compression = Compression::kBfloat16};
    return std::vector<Tensor>{ctx.all_reduce(ReduceOp::kSum, x), ctx.all_gather(x, 0),
                               ctx.reduce_scatter(ReduceOp::kMean, x), ctx.all_reduce(ReduceOp::kSum, x, bf16)};
  });
  const auto issued = s.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const Tensor x = Tensor::from_vector<float>(values(ctx.replica_id_in_sync_group()));
    const CommunicationOptions bf16{.compression = Compression::kBfloat16};
    CollectiveHandle<Tensor> sum = ctx.all_reduce_async(ReduceOp::kSum, x);
    CollectiveHandle<Tensor> gathered = ctx.all_gather_async(x, 0);
    const Tensor shard = ctx.reduce_scatter(ReduceOp::kMean, x);
    CollectiveHandle<Tensor> compressed = ctx.all_reduce_async(ReduceOp::kSum, x, bf16);
    const Tensor last = compressed.wait();
    return std::vector<Tensor>{sum.wait(), gathered.wait(), shard, last};
  });
  for (int l = 0; l < local(); ++l) {
    for (std::size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(issued[l][k].to_vector<float>(), blocking[l][k].to_vector<float>()) << "replica " << l << ", result " << k;
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

// The step across the workers that the last replica to arrive takes is moving data, not waiting:
// it is counted once, apart. Were it counted in the others' waits too, a run of large all_reduces
// (whose time is mostly that step) would show a wait and a cross-worker time adding up to more
// than the run.
TEST_F(MultiWorker, CollectiveStatsCountTheStepAcrossWorkersApartFromTheWaits) {
  constexpr int kCollectives = 4;
  s.extended().reset_collective_stats();
  const auto started = std::chrono::steady_clock::now();
  s.run([] {
    ReplicaContext* ctx = get_replica_context();
    for (int i = 0; i < kCollectives; ++i) ctx->all_reduce(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{1 << 20}));
  });
  const double run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CollectiveStats stats = s.extended().collective_stats();
  EXPECT_GT(stats.cross_worker_seconds, 0.0);
  EXPECT_LT(stats.cross_worker_seconds, run_seconds);
  for (const ReplicaCollectiveStats& replica : stats.replicas) {
    SCOPED_TRACE(replica.replica_id);
    EXPECT_EQ(replica.collectives, kCollectives);
    EXPECT_LE(replica.wait_seconds + stats.cross_worker_seconds, run_seconds);
  }
  s.extended().reset_collective_stats();
  EXPECT_EQ(s.extended().collective_stats().cross_worker_seconds, 0.0);
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

}  // namespace
}  // namespace distribute

// Places this worker's replicas on GPUs: its own GPUs when the machine has enough for every
// worker, else the same GPUs as the other workers of this machine, each worker then presenting
// itself to NCCL as a host of its own (NCCL refuses two ranks on one GPU of one host), so that
// NCCL joins them through its network transport as it joins workers on separate machines.
// Returns false, with the reason, where that cannot be done.
bool place_on_gpus(std::string& why_not) {
  using distribute::testing::g_local_replicas;
  const int gpus = distribute::num_physical_gpus();
  if (gpus == 0) {
    why_not = "no GPU visible: " + distribute::gpu_unavailable_reason();
    return false;
  }
  if (gpus < g_local_replicas) {
    why_not = "needs " + std::to_string(g_local_replicas) + " GPUs per worker, " + std::to_string(gpus) + " visible";
    return false;
  }
  // mpirun's variables, else those of tests/launch_workers.sh (torchrun's names).
  const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local_rank == nullptr) local_rank = std::getenv("LOCAL_RANK");
  if (local_size == nullptr) local_size = std::getenv("LOCAL_WORLD_SIZE");
  const int rank = local_rank != nullptr ? std::atoi(local_rank) : 0;
  const int size = local_size != nullptr ? std::atoi(local_size) : 1;
  distribute::testing::g_device_type = "GPU:";
  if (gpus >= size * g_local_replicas) {
    distribute::testing::g_first_gpu = rank * g_local_replicas;
  } else {
    setenv("NCCL_HOSTID", ("distribute-test-worker-" + std::to_string(rank)).c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  }
  return true;
}

// Each worker's host name, in worker order: gathered over MPI where the strategy runs over it (MPI
// is up once it is made), else through the strategy itself, each replica giving its worker's name
// as a row of characters.
std::vector<std::string> every_workers_host(distribute::MultiWorkerMirroredStrategy& s) {
  using namespace distribute;
  std::vector<std::string> hosts;
  if (s.backend() == CollectiveBackend::kMpi) {
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_Get_processor_name(host, &length);
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < size; ++r) hosts.emplace_back(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
    return hosts;
  }
  constexpr int kChars = 256;
  std::array<char, kChars> name{};
  gethostname(name.data(), kChars - 1);
  std::vector<std::int32_t> row(name.begin(), name.end());
  const PerReplica<Tensor> rows = s.run([&row] {
    return get_replica_context()->all_gather(Tensor::from_vector<std::int32_t>(row, Shape{1, kChars}), 0);
  });
  const std::vector<std::int32_t> all = rows[0].to_vector<std::int32_t>();
  const int local = s.extended().num_local_replicas();
  for (int w = 0; w < s.extended().num_workers(); ++w) {
    std::string host;
    for (int c = 0; c < kChars && all[static_cast<std::size_t>((w * local) * kChars + c)] != 0; ++c) {
      host += static_cast<char>(all[static_cast<std::size_t>((w * local) * kChars + c)]);
    }
    hosts.push_back(host);
  }
  return hosts;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  bool gpu = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--local_replicas=", 0) == 0) distribute::testing::g_local_replicas = std::stoi(arg.substr(17));
    if (arg == "--device=gpu") gpu = true;
  }
  std::string why_not;
  if (gpu && !place_on_gpus(why_not)) {
    std::printf("skipped: %s\n", why_not.c_str());
    return 77;
  }
  distribute::testing::g_hosts = every_workers_host(distribute::testing::strategy());
  return RUN_ALL_TESTS();
}

