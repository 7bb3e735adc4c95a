// GPU replicas, for real; each test skips and says why when no GPU is visible (the ctest label
// 'gpu' counts them): OneDeviceStrategy on a GPU, MirroredStrategy over one GPU through NCCL, over
// 2-4 logical GPUs of one physical GPU through one device, over every physical GPU, with every
// dtype, nests, uneven gathers, user device buffers, failures and rebuilds.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include "distribute/config.h"
#include "distribute/device/gpu.h"
#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

#if DISTRIBUTE_HAS_CUDA
#include <cuda_runtime_api.h>

#include "testing/gpu_work.h"
#endif

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;


#if !DISTRIBUTE_HAS_CUDA
TEST(OnGpu, NotBuilt) { GTEST_SKIP() << "this build has no GPU backend (configure with -DDISTRIBUTE_WITH_CUDA=ON)"; }
#else

class OnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (num_physical_gpus() == 0) GTEST_SKIP() << "no GPU visible: " << gpu_unavailable_reason();
  }
};

// Splits physical GPU 0 into n logical GPUs; call before anything uses a GPU.
void split_gpu0(int n) { set_logical_device_configuration(0, std::vector<LogicalDeviceConfiguration>(n)); }

template <class T>
std::vector<T> values_for(int replica, int count) {
  std::vector<T> v;
  for (int i = 0; i < count; ++i) v.push_back(static_cast<T>(static_cast<float>(replica + 1 + i % 7)));
  return v;
}

// Every replica all-reduces (SUM and MEAN) and all-gathers float32 tensors created on its device.
void expect_collectives_work(MirroredStrategy& strategy) {
  const int n = strategy.num_replicas_in_sync();
  PerReplica<Tensor> sums = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    Tensor mine = Tensor::from_vector<float>(values_for<float>(r, 1000));
    EXPECT_EQ(mine.device(), ctx.device());
    return ctx.all_reduce(ReduceOp::kSum, mine);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(sums[r].device(), strategy.extended().worker_devices()[static_cast<std::size_t>(r)]);
    const std::vector<float> got = sums[r].to_vector<float>();
    for (int i = 0; i < 1000; ++i) {
      float expected = 0;
      for (int q = 0; q < n; ++q) expected += static_cast<float>(q + 1 + i % 7);
      ASSERT_EQ(got[static_cast<std::size_t>(i)], expected) << "replica " << r << " element " << i;
    }
  }
  // reduce_scatter: 1000 elements (equal shards for 1, 2 and 4 replicas) and 7 (uneven ones).
  PerReplica<std::vector<Tensor>> shards = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    return ctx.reduce_scatter(ReduceOp::kSum, std::vector<Tensor>{Tensor::from_vector<float>(values_for<float>(r, 1000)),
                                                                  Tensor::from_vector<float>(values_for<float>(r, 7))});
  });
  for (int r = 0; r < n; ++r) {
    for (const int count : {1000, 7}) {
      const Tensor& shard = shards[r][count == 1000 ? 0 : 1];
      EXPECT_EQ(shard.device(), strategy.extended().worker_devices()[static_cast<std::size_t>(r)]);
      const Shard part = shard_of(count, n, r);
      std::vector<float> expected;
      for (std::int64_t i = part.begin; i < part.begin + part.size; ++i) {
        float sum = 0;
        for (int q = 0; q < n; ++q) sum += static_cast<float>(q + 1 + i % 7);
        expected.push_back(sum);
      }
      EXPECT_EQ(shard.to_vector<float>(), expected) << "replica " << r << ", " << count << " elements";
    }
  }
  // Uneven sizes along the axis, and an inner axis.
  PerReplica<std::vector<Tensor>> gathered = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    std::vector<int> rows(static_cast<std::size_t>(2 * (r + 1)), r);
    Tensor column = Tensor::from_vector<int>(std::vector<int>(static_cast<std::size_t>(r + 1) * 2, r),
                                             Shape{2, r + 1});
    return std::vector<Tensor>{ctx.all_gather(Tensor::from_vector<int>(rows), 0), ctx.all_gather(column, 1)};
  });
  for (int r = 0; r < n; ++r) {
    std::vector<int> expected_rows;
    std::vector<int> expected_row;
    for (int q = 0; q < n; ++q) {
      expected_rows.insert(expected_rows.end(), static_cast<std::size_t>(2 * (q + 1)), q);
      expected_row.insert(expected_row.end(), static_cast<std::size_t>(q + 1), q);
    }
    std::vector<int> expected_matrix = expected_row;
    expected_matrix.insert(expected_matrix.end(), expected_row.begin(), expected_row.end());
    EXPECT_EQ(gathered[r][0].to_vector<int>(), expected_rows);
    EXPECT_EQ(gathered[r][1].to_vector<int>(), expected_matrix);
  }
  // Scalars, a mixed-dtype nest, MEAN, merge_call with reduce_to and Strategy::reduce.
  PerReplica<double> means = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    return ctx.all_reduce(ReduceOp::kMean, static_cast<double>(ctx.replica_id_in_sync_group()));
  });
  for (int r = 0; r < n; ++r) EXPECT_DOUBLE_EQ(means[r], (n - 1) / 2.0);
  PerReplica<Tensor> ones = strategy.run([] { return Tensor::from_vector<float>({1, 2}); });
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, ones, std::nullopt).to_vector<float>(),
            (std::vector<float>{static_cast<float>(n), 2.0f * static_cast<float>(n)}));
  PerReplica<Tensor> merged = strategy.run([] {
    Tensor mine = Tensor::from_vector<float>({3});
    return get_replica_context()->merge_call(
        [](Strategy& s, const PerReplica<Tensor>& v) {
          return s.extended().reduce_to(ReduceOp::kSum, v, v);
        },
        mine);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(merged[r].to_vector<float>(), (std::vector<float>{3.0f * static_cast<float>(n)}));
}

TEST_F(OnGpu, OneDeviceStrategy) {
  OneDeviceStrategy strategy("GPU:0");
  PerReplica<Tensor> out = strategy.run([] {
    Tensor t = Tensor::from_vector<float>({1, 2, 3});
    EXPECT_EQ(t.device(), Device::gpu(0));
    EXPECT_NE(cuda::current_stream(), nullptr);
    return get_replica_context()->all_reduce(ReduceOp::kSum, t);
  });
  EXPECT_EQ(out[0].device(), Device::gpu(0));
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Tensor::zeros(DType::kInt64, Shape{3}, Device::gpu(0)).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{0, 0, 0}));
}

TEST_F(OnGpu, MirroredOverOneGpuThroughNccl) {
  if (!DISTRIBUTE_HAS_NCCL) GTEST_SKIP() << "this build has no NCCL";
  MirroredStrategy strategy({"GPU:0"});
  EXPECT_EQ(strategy.cross_device_ops(), "NcclAllReduce");
  expect_collectives_work(strategy);
}

TEST_F(OnGpu, MirroredOverEveryPhysicalGpu) {
  MirroredStrategy strategy;  // every GPU
  EXPECT_EQ(strategy.num_replicas_in_sync(), num_physical_gpus());
  EXPECT_EQ(strategy.cross_device_ops(), DISTRIBUTE_HAS_NCCL ? "NcclAllReduce" : "ReductionToOneDevice");
  expect_collectives_work(strategy);
}

class OnLogicalGpus : public OnGpu, public ::testing::WithParamInterface<int> {};
INSTANTIATE_TEST_SUITE_P(Split, OnLogicalGpus, ::testing::Values(2, 3, 4),
                         [](const auto& p) { return std::to_string(p.param) + "logical"; });

TEST_P(OnLogicalGpus, MirroredReducesThroughOneDevice) {
  split_gpu0(GetParam());
  MirroredStrategy strategy(std::vector<std::string>{});
  EXPECT_GE(strategy.num_replicas_in_sync(), GetParam());
  MirroredStrategy split([&] {
    std::vector<std::string> devices;
    for (int k = 0; k < GetParam(); ++k) devices.push_back("GPU:" + std::to_string(k));
    return devices;
  }());
  EXPECT_EQ(split.cross_device_ops(), "ReductionToOneDevice");
  expect_collectives_work(split);
}

TEST_P(OnLogicalGpus, NcclRefusesThem) {
  if (!DISTRIBUTE_HAS_NCCL) GTEST_SKIP() << "this build has no NCCL";
  split_gpu0(GetParam());
  MirroredStrategyOptions options;
  options.cross_device_ops = CrossDeviceOps::kNcclAllReduce;
  expect_error<InvalidArgumentError>([&] { MirroredStrategy strategy({"GPU:0", "GPU:1"}, options); },
                                     {"both are logical GPUs of physical GPU 0"});
}

template <class T>
class OnGpuTyped : public OnGpu {};
using GpuElementTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, Half, BFloat16>;
TYPED_TEST_SUITE(OnGpuTyped, GpuElementTypes);

template <class T>
void expect_typed_all_reduce(MirroredStrategy& strategy) {
  const int n = strategy.num_replicas_in_sync();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
    PerReplica<Tensor> out = strategy.run([op] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      return get_replica_context()->all_reduce(op, Tensor::from_vector<T>(std::vector<T>(37, static_cast<T>(2 * (r + 1)))));
    });
    double expected = 0;
    for (int q = 0; q < n; ++q) expected += 2 * (q + 1);
    if (op == ReduceOp::kMean) expected /= n;
    for (int r = 0; r < n; ++r) {
      for (T v : out[r].to_vector<T>()) {
        ASSERT_EQ(static_cast<double>(static_cast<float>(v)), std::trunc(expected)) << reduce_op_name(op);
      }
    }
  }
}

TYPED_TEST(OnGpuTyped, EveryDtypeThroughTheDefaultBackend) {
  MirroredStrategy strategy({"GPU:0"});
  expect_typed_all_reduce<TypeParam>(strategy);
}

TYPED_TEST(OnGpuTyped, EveryDtypeThroughOneDevice) {
  split_gpu0(3);
  MirroredStrategy strategy({"GPU:0", "GPU:1", "GPU:2"});
  expect_typed_all_reduce<TypeParam>(strategy);
}

TEST_F(OnGpu, UserDeviceBuffersGoInWithoutACopy) {
  float* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&buffer), 4 * sizeof(float)), cudaSuccess);
  const std::vector<float> values = {1, 2, 3, 4};
  ASSERT_EQ(cudaMemcpy(buffer, values.data(), sizeof(float) * 4, cudaMemcpyHostToDevice), cudaSuccess);
  {
    Tensor view = Tensor::from_blob(buffer, DType::kFloat32, Shape{4}, Device::gpu(0));
    EXPECT_EQ(view.raw_data(), buffer);
    MirroredStrategy strategy({"GPU:0"});
    PerReplica<Tensor> out = strategy.run(
        [](const Tensor& mine) { return get_replica_context()->all_reduce(ReduceOp::kSum, mine); },
        PerReplica<Tensor>({view}));
    EXPECT_EQ(out[0].to_vector<float>(), values);
  }
  cudaFree(buffer);
}

TEST_F(OnGpu, FusedNestWithSmallPacks) {
  split_gpu0(2);
  for (const char* devices : {"logical", "physical"}) {
    const bool logical = std::string(devices) == "logical";
    if (!logical && !DISTRIBUTE_HAS_NCCL) continue;
    MirroredStrategyOptions options;
    options.communication.bytes_per_pack = 4096;
    MirroredStrategy strategy(logical ? std::vector<std::string>{"GPU:0", "GPU:1"} : std::vector<std::string>{"GPU:0"},
                              options);
    const int n = strategy.num_replicas_in_sync();
    PerReplica<std::vector<Tensor>> out = strategy.run([] {
      std::vector<Tensor> grads;
      for (int i = 0; i < 20; ++i) grads.push_back(Tensor::from_vector<float>(std::vector<float>(100 * (i + 1), 1.0f)));
      grads.push_back(Tensor::from_vector<std::int64_t>({7}));
      return get_replica_context()->all_reduce(ReduceOp::kSum, grads);
    });
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(out[r][static_cast<std::size_t>(i)].to_vector<float>(),
                  std::vector<float>(100 * static_cast<std::size_t>(i + 1), static_cast<float>(n)))
            << devices << " leaf " << i;
      }
      EXPECT_EQ(out[r][20].to_vector<std::int64_t>(), (std::vector<std::int64_t>{7 * n}));
    }
  }
}

TEST_F(OnGpu, AFailingReplicaReleasesTheOthersAndTheStrategyRecovers) {
  testing::Watchdog watchdog(std::chrono::seconds(50), "GPU failure test");
  split_gpu0(2);
  MirroredStrategy one_device({"GPU:0", "GPU:1"});
  for (MirroredStrategy* strategy : {&one_device}) {
    expect_error<InvalidArgumentError>(
        [&] {
          strategy->run([] {
            ReplicaContext& ctx = *get_replica_context();
            Tensor t = Tensor::from_vector<float>({1});
            t = ctx.all_reduce(ReduceOp::kSum, t);
            if (ctx.replica_id_in_sync_group() == 1) throw InvalidArgumentError("replica 1 gives up");
            return ctx.all_reduce(ReduceOp::kSum, t);
          });
        },
        {"replica 1 gives up"});
    expect_collectives_work(*strategy);
  }
}

TEST_F(OnGpu, NcclFailureAbortsAndTheStrategyRebuildsItsCommunicators) {
  if (!DISTRIBUTE_HAS_NCCL) GTEST_SKIP() << "this build has no NCCL";
  testing::Watchdog watchdog(std::chrono::seconds(50), "NCCL failure test");
  MirroredStrategy strategy({"GPU:0"});
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] {
          Tensor t = get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::from_vector<float>({1}));
          throw InvalidArgumentError("the step gives up");
        });
      },
      {"the step gives up"});
  expect_collectives_work(strategy);
}

TEST_F(OnGpu, LogicalMemoryLimit) {
  set_logical_device_configuration(0, {{.memory_limit = 1 << 20}, {}});
  expect_error<ResourceExhaustedError>(
      [] { (void)Tensor::empty(DType::kFloat32, Shape{1 << 19}, Device::gpu(0)); },
      {"allocating 2097152 bytes on GPU:0 would exceed its memory_limit of 1048576 bytes"});
  EXPECT_EQ(Tensor::empty(DType::kFloat32, Shape{1 << 19}, Device::gpu(1)).num_elements(), 1 << 19);
}

TEST_F(OnGpu, TheReplicaStreamOrdersUserWork) {
  MirroredStrategy strategy({"GPU:0"});
  PerReplica<std::uintptr_t> streams = strategy.run([] {
    EXPECT_NE(cuda::current_stream(), cudaStreamLegacy);
    return reinterpret_cast<std::uintptr_t>(cuda::current_stream());
  });
  PerReplica<std::uintptr_t> again = strategy.run([] { return reinterpret_cast<std::uintptr_t>(cuda::current_stream()); });
  EXPECT_EQ(streams[0], again[0]);  // created once, with the strategy
}

// Async collectives on GPUs run on each replica's communication stream. They start after the
// replica's work issued before them (a fill that ends 50 ms later), the replica's work after
// wait() sees their results, and the replica's work issued in between does not hold them back: it
// is a kernel that spins until a watcher on a stream of its own has seen the all_reduce's result
// arrive (or 5 s pass). Were the collective queued behind that kernel, the watcher would give up
// after 3 s without seeing it.
void expect_async_collectives_overlap(MirroredStrategy& strategy) {
  const int n = strategy.num_replicas_in_sync();
  constexpr std::int64_t kCount = std::int64_t{1} << 22;  // 16 MiB of float32
  const auto results = strategy.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    const auto stream = static_cast<cudaStream_t>(cuda::current_stream());
    Tensor seen = Tensor::zeros(DType::kInt32, Shape{1}, ctx.device());
    cudaEvent_t cleared = nullptr;
    EXPECT_EQ(cudaEventCreateWithFlags(&cleared, cudaEventDisableTiming), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(cleared, stream), cudaSuccess);
    Tensor x = Tensor::empty(DType::kFloat32, Shape{kCount}, ctx.device());
    EXPECT_EQ(testing::gpu::fill_late(static_cast<float*>(x.raw_data()), kCount, static_cast<float>(r + 1), 50'000'000, stream), cudaSuccess);
    CollectiveHandle<Tensor> sum = ctx.all_reduce_async(ReduceOp::kSum, x);
    CollectiveHandle<Tensor> gathered = ctx.all_gather_async(x, 0);
    EXPECT_EQ(testing::gpu::wait_for_flag(static_cast<const int*>(seen.raw_data()), 5'000'000'000, stream), cudaSuccess);
    const Tensor& total = sum.wait();
    cudaStream_t side = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(side, cleared, 0), cudaSuccess);
    EXPECT_EQ(testing::gpu::watch_for(static_cast<const float*>(total.raw_data()) + kCount - 1, static_cast<float>(n * (n + 1) / 2),
                                      static_cast<int*>(seen.raw_data()), 3'000'000'000, side),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(side), cudaSuccess);
    cudaStreamDestroy(side);
    cudaEventDestroy(cleared);
    return std::vector<Tensor>{seen, total, gathered.wait()};
  });
  for (int r = 0; r < n; ++r) {
    const int seen = results[r][0].to_vector<int>()[0];
    const std::vector<float> total = results[r][1].to_vector<float>();
    const std::vector<float> all = results[r][2].to_vector<float>();
    EXPECT_EQ(seen, 1) << "replica " << r << ": the all_reduce waited behind the replica's later work";
    ASSERT_EQ(total.size(), static_cast<std::size_t>(kCount));
    EXPECT_EQ(std::count(total.begin(), total.end(), static_cast<float>(n * (n + 1) / 2)), kCount) << "replica " << r;
    ASSERT_EQ(all.size(), static_cast<std::size_t>(kCount * n));
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(std::count(all.begin() + q * kCount, all.begin() + (q + 1) * kCount, static_cast<float>(q + 1)), kCount)
          << "replica " << r << ", part of replica " << q;
    }
  }
}

TEST_F(OnGpu, AsyncCollectivesThroughNcclOverlapTheReplicasWork) {
  MirroredStrategyOptions options;
  options.cross_device_ops = DISTRIBUTE_HAS_NCCL ? CrossDeviceOps::kNcclAllReduce : CrossDeviceOps::kAuto;
  MirroredStrategy strategy({"GPU:0"}, options);
  expect_async_collectives_overlap(strategy);
}

TEST_F(OnGpu, AsyncCollectivesOnLogicalGpusOverlapTheReplicasWork) {
  split_gpu0(2);
  MirroredStrategy strategy({"GPU:0", "GPU:1"});
  expect_async_collectives_overlap(strategy);
}

// One NCCL rank: nothing crosses a link, so a compressed sum is float32's, exactly (no overflow
// either); across ranks multi_worker_test --device=gpu checks the 16-bit path.
TEST_F(OnGpu, CompressionThroughOneNcclRankIsExact) {
  MirroredStrategyOptions options;
  options.cross_device_ops = DISTRIBUTE_HAS_NCCL ? CrossDeviceOps::kNcclAllReduce : CrossDeviceOps::kAuto;
  MirroredStrategy strategy({"GPU:0"}, options);
  const std::vector<float> values{1.0f, 70000.0f, 1.0f + 0x1p-10f};
  for (const Compression c : {Compression::kBfloat16, Compression::kFloat16}) {
    const auto sums = strategy.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      const CommunicationOptions compressed{.compression = c};
      return std::make_pair(ctx.all_reduce(ReduceOp::kSum, Tensor::from_vector<float>(values), compressed),
                            ctx.reduce_scatter(ReduceOp::kSum, Tensor::from_vector<float>(values), compressed));
    });
    EXPECT_EQ(sums[0].first.to_vector<float>(), values) << compression_name(c);
    EXPECT_EQ(sums[0].second.to_vector<float>(), values) << compression_name(c);
  }
}

// Device memory a training loop holds stays flat: after a warm-up, 10,000 more steps (a gradient
// list all-reduced, an Adam step, a gather, a merge_call) leave the pool's bytes in use, the
// pool's reserve and the device's free memory where they were. Runs over NCCL (GPU:0) and over two
// logical GPUs.
struct DeviceMemory {
  std::size_t pool_used = 0;
  std::size_t pool_reserved = 0;
  std::size_t device_free = 0;
};

DeviceMemory device_memory() {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaMemPool_t pool = nullptr;
  EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  std::uint64_t used = 0;
  std::uint64_t reserved = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
  std::size_t free = 0;
  std::size_t total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return {static_cast<std::size_t>(used), static_cast<std::size_t>(reserved), free};
}

void train_steps(MirroredStrategy& strategy, optimizers::Optimizer& optimizer, const Variable& w, int steps) {
  for (int step = 0; step < steps; ++step) {
    strategy.run([&, step] {
      ReplicaContext& ctx = *get_replica_context();
      const float r = static_cast<float>(ctx.replica_id_in_sync_group());
      std::vector<Tensor> grads = {Tensor::zeros(DType::kFloat32, Shape{256, 1024}), Tensor::zeros(DType::kFloat32, Shape{1000}),
                                   Tensor::from_vector<float>({r})};
      grads = ctx.all_reduce(ReduceOp::kMean, grads);
      // And one on the replica's communication stream, with its events.
      grads[2] = ctx.all_reduce_async(ReduceOp::kSum, grads[2]).wait();
      optimizer.apply_gradients({{grads[1], w}});
      Tensor gathered = ctx.all_gather(Tensor::from_vector<std::int64_t>({step}), 0);
      return ctx.merge_call([](Strategy& s, const PerReplica<Tensor>& g) { return s.extended().reduce_to(ReduceOp::kSum, g, g); },
                            gathered);
    });
  }
}

TEST_F(OnGpu, NoDeviceMemoryGrowsOverTenThousandSteps) {
  testing::Watchdog watchdog(std::chrono::seconds(55), "memory growth test");
  split_gpu0(2);
  MirroredStrategyOptions nccl_options;
  nccl_options.cross_device_ops = DISTRIBUTE_HAS_NCCL ? CrossDeviceOps::kNcclAllReduce : CrossDeviceOps::kAuto;
  MirroredStrategy physical({"GPU:0"}, nccl_options);
  MirroredStrategy logical({"GPU:0", "GPU:1"});
  for (MirroredStrategy* strategy : {&physical, &logical}) {
    Variable w;
    std::unique_ptr<optimizers::Adam> adam;
    {
      StrategyScope scope = strategy->scope();
      w = Variable(Tensor::zeros(DType::kFloat32, Shape{1000}), {.name = "w"});
      adam = std::make_unique<optimizers::Adam>(0.001);
    }
    train_steps(*strategy, *adam, w, 200);
    const DeviceMemory before = device_memory();
    train_steps(*strategy, *adam, w, 10'000);
    const DeviceMemory after = device_memory();
    const std::string ops(strategy->cross_device_ops());
    std::printf("%s: pool in use %zu -> %zu bytes, pool reserved %zu -> %zu, device free %zu -> %zu\n", ops.c_str(), before.pool_used, after.pool_used, before.pool_reserved,
                after.pool_reserved, before.device_free, after.device_free);
    EXPECT_LE(after.pool_used, before.pool_used) << ops;
    EXPECT_LE(after.pool_reserved, before.pool_reserved) << ops;
    EXPECT_GE(after.device_free, before.device_free) << ops;
  }
}

// Variables on GPUs: each component lives on its replica's GPU and every update runs there, with
// the same aggregation rules as on the host.
void expect_variables_work(MirroredStrategy& strategy) {
  const int n = strategy.num_replicas_in_sync();
  Variable mean;
  Variable total;
  Variable on_read;
  Variable first;
  Variable none;
  {
    StrategyScope scope = strategy.scope();
    mean = Variable(Tensor::from_vector<float>({1, 2}), {.name = "mean", .aggregation = VariableAggregation::kMean});
    total = Variable(std::int32_t{0}, {.name = "total", .aggregation = VariableAggregation::kSum});
    on_read = Variable(0.0f, {.name = "on_read",
                              .synchronization = VariableSynchronization::kOnRead,
                              .aggregation = VariableAggregation::kSum});
    first = Variable(0.0, {.name = "first", .aggregation = VariableAggregation::kOnlyFirstReplica});
    none = Variable(1.0f, {.name = "none"});
  }
  for (const Variable* v : {&mean, &total, &on_read, &first, &none}) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(v->component(r).device(), strategy.extended().worker_devices()[static_cast<std::size_t>(r)])
          << v->name();
    }
  }
  strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    mean.assign_add(Tensor::from_vector<float>({static_cast<float>(r), static_cast<float>(2 * r)}));
    total.assign_add(std::int32_t{r + 2});
    total.assign_sub(std::int32_t{1});
    on_read.assign_add(static_cast<float>(r + 1));
    first.assign(10.0 + r);
    none.assign(3.0f);
  });
  const float m = static_cast<float>(n - 1) / 2.0f;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(mean.component(r).to_vector<float>(), (std::vector<float>{1 + m, 2 + 2 * m})) << "replica " << r;
    EXPECT_EQ(total.component(r).to_vector<std::int32_t>(), (std::vector<std::int32_t>{n * (n + 1) / 2})) << r;
    EXPECT_EQ(first.component(r).to_vector<double>(), (std::vector<double>{10.0})) << "replica " << r;
    EXPECT_EQ(none.component(r).to_vector<float>(), (std::vector<float>{3.0f})) << "replica " << r;
    EXPECT_EQ(on_read.component(r).to_vector<float>(), (std::vector<float>{static_cast<float>(r + 1)})) << r;
  }
  EXPECT_EQ(on_read.value().to_vector<float>(), (std::vector<float>{static_cast<float>(n * (n + 1) / 2)}));
  // Cross-replica updates write every component from the host.
  mean.assign(Tensor::from_vector<float>({5, 6}));
  on_read.assign(static_cast<float>(2 * n));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(mean.component(r).to_vector<float>(), (std::vector<float>{5, 6})) << "replica " << r;
    EXPECT_EQ(on_read.component(r).to_vector<float>(), (std::vector<float>{2.0f})) << "replica " << r;
  }
  std::ostringstream printed;
  printed << mean;
  EXPECT_NE(printed.str().find("numpy=[5.0, 6.0]"), std::string::npos) << printed.str();
  if (n > 1) {
    expect_error<InvalidArgumentError>(
        [&] { strategy.run([&] { none.assign(static_cast<float>(get_replica_context()->replica_id_in_sync_group())); }); },
        {"Variable 'none': assign with aggregation NONE in replica context needs the same value on every replica",
         "replica"});
  }
}

// Weights after `steps` steps of `optimizer` (made by make()) in replica context, each replica
// passing gradient (step + 1) * (k - 1.5) * (replica + 1) for element k, summed over replicas.
template <class T, class MakeOptimizer>
std::vector<double> train(Strategy& strategy, MakeOptimizer make, int steps, std::int64_t* iterations = nullptr) {
  Variable w;
  std::unique_ptr<optimizers::Optimizer> optimizer;
  {
    StrategyScope scope = strategy.scope();
    w = Variable(Tensor::from_vector<T>({T(1), T(-2), T(0.5), T(3)}), {.name = "w"});
    optimizer = make();
  }
  for (int step = 0; step < steps; ++step) {
    strategy.run([&] {
      const T scale = static_cast<T>((step + 1) * (get_replica_context()->replica_id_in_sync_group() + 1));
      std::vector<T> g;
      for (int k = 0; k < 4; ++k) g.push_back(scale * static_cast<T>(k - 1.5));
      optimizer->apply_gradients({{Tensor::from_vector<T>(g), w}});
    });
  }
  // And one step from the host, in cross-replica context.
  optimizer->apply_gradients({{Tensor::from_vector<T>({T(0.25), T(-0.5), T(1), T(2)}, Shape{4}, Device::cpu()), w}});
  if (iterations != nullptr) *iterations = optimizer->iterations().value().to_vector<std::int64_t>()[0];
  std::vector<double> out;
  for (int r = 0; r < w.num_components(); ++r) {
    EXPECT_EQ(w.component(r).device(), strategy.extended().worker_devices()[static_cast<std::size_t>(r)]);
    for (T v : w.component(r).to_vector<T>()) out.push_back(static_cast<double>(v));
  }
  return out;
}

// The optimizers step on the GPU as they do on the host (the kernels round each operation as the
// host loops do, so the results agree to the last bits or within a few units in the last place).
void expect_optimizers_step_as_on_the_host(MirroredStrategy& gpu, MirroredStrategy& cpu) {
  using optimizers::Adam;
  using optimizers::SGD;
  using optimizers::SGDOptions;
  const std::vector<std::pair<std::string, std::function<std::unique_ptr<optimizers::Optimizer>()>>> kinds = {
      {"SGD", [] { return std::make_unique<SGD>(0.1); }},
      {"SGD momentum", [] { return std::make_unique<SGD>(0.1, 0.9); }},
      {"SGD Nesterov",
       [] { return std::make_unique<SGD>(SGDOptions{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true}); }},
      {"Adam", [] { return std::make_unique<Adam>(0.01); }},
  };
  for (const auto& [name, make] : kinds) {
    std::int64_t gpu_steps = 0;
    const std::vector<double> on_gpu = train<float>(gpu, make, 5, &gpu_steps);
    const std::vector<double> on_cpu = train<float>(cpu, make, 5);
    EXPECT_EQ(gpu_steps, 6) << name;
    ASSERT_EQ(on_gpu.size(), on_cpu.size()) << name;
    double worst = 0;
    for (std::size_t i = 0; i < on_gpu.size(); ++i) {
      EXPECT_NEAR(on_gpu[i], on_cpu[i], 1e-6 * std::max(1.0, std::abs(on_cpu[i]))) << name << " element " << i;
      worst = std::max(worst, std::abs(on_gpu[i] - on_cpu[i]));
    }
    const std::vector<double> on_gpu64 = train<double>(gpu, make, 5);
    const std::vector<double> on_cpu64 = train<double>(cpu, make, 5);
    for (std::size_t i = 0; i < on_gpu64.size(); ++i) {
      EXPECT_NEAR(on_gpu64[i], on_cpu64[i], 1e-12 * std::max(1.0, std::abs(on_cpu64[i]))) << name << " float64 " << i;
      worst = std::max(worst, std::abs(on_gpu64[i] - on_cpu64[i]));
    }
    std::printf("%s on %s: largest difference from the host %.3g\n", name.c_str(), gpu.name().c_str(), worst);
  }
}

TEST_F(OnGpu, VariablesLiveAndUpdateOnTheReplicasGpu) {
  MirroredStrategy strategy({"GPU:0"});
  expect_variables_work(strategy);
}

TEST_F(OnGpu, VariablesOnLogicalGpus) {
  split_gpu0(2);
  MirroredStrategy strategy({"GPU:0", "GPU:1"});
  expect_variables_work(strategy);
}

TEST_F(OnGpu, OptimizersStepOnTheGpuAsOnTheHost) {
  MirroredStrategy gpu({"GPU:0"});
  MirroredStrategy cpu({"CPU:0"});
  expect_optimizers_step_as_on_the_host(gpu, cpu);
}

TEST_F(OnGpu, OptimizersOnLogicalGpusStepAsOnTwoCpuReplicas) {
  split_gpu0(2);
  MirroredStrategy gpu({"GPU:0", "GPU:1"});
  MirroredStrategy cpu({"CPU:0", "CPU:1"});
  expect_optimizers_step_as_on_the_host(gpu, cpu);
}

// Optimizer state in shards on GPU replicas: the same weights, bit for bit, as whole state on
// the same replicas (the kernels are elementwise), through one device's reduction (logical GPUs)
// and through NCCL (every physical GPU).
void expect_sharded_state_as_whole(MirroredStrategy& strategy) {
  using optimizers::Adam;
  using optimizers::AdamOptions;
  using optimizers::OptimizerOptions;
  using optimizers::SGD;
  using optimizers::SGDOptions;
  for (const bool adam : {false, true}) {
    const auto make = [adam](bool shard) -> std::unique_ptr<optimizers::Optimizer> {
      if (adam) return std::make_unique<Adam>(AdamOptions{.learning_rate = 0.01}, OptimizerOptions{shard});
      return std::make_unique<SGD>(SGDOptions{.learning_rate = 0.1, .momentum = 0.9}, OptimizerOptions{shard});
    };
    const std::vector<double> whole = train<float>(strategy, [&] { return make(false); }, 5);
    const std::vector<double> sharded = train<float>(strategy, [&] { return make(true); }, 5);
    EXPECT_EQ(sharded, whole) << (adam ? "Adam" : "SGD momentum") << " on " << strategy.name();
  }
}

TEST_F(OnGpu, ShardedOptimizerStateOnLogicalGpusIsBitIdentical) {
  split_gpu0(2);
  MirroredStrategy strategy({"GPU:0", "GPU:1"});
  expect_sharded_state_as_whole(strategy);
}

TEST_F(OnGpu, ShardedOptimizerStateThroughNcclIsBitIdentical) {
  if (!DISTRIBUTE_HAS_NCCL) GTEST_SKIP() << "this build has no NCCL";
  MirroredStrategy strategy;  // every GPU
  expect_sharded_state_as_whole(strategy);
}

// An optimizer step on GPU variables is only enqueued on the replica's stream: the step count
// stays on the GPU (Adam's bias correction is worked out there), so apply_gradients returns while
// the stream is held back by a host function, where copying the count to the host would wait for
// it. The steps then give what they give on the host.
TEST_F(OnGpu, OptimizerStepsDoNotWaitForTheReplicasStream) {
  MirroredStrategy gpu({"GPU:0"});
  MirroredStrategy cpu({"CPU:0"});
  struct Model {
    Variable w;
    std::unique_ptr<optimizers::Adam> adam;
    std::unique_ptr<optimizers::SGD> sgd;
  };
  const auto make = [](Strategy& strategy) {
    StrategyScope scope = strategy.scope();
    Model m{Variable(Tensor::from_vector<float>({1, -2, 3}), {.name = "w"}), std::make_unique<optimizers::Adam>(0.1),
            std::make_unique<optimizers::SGD>(0.1, 0.9)};
    m.adam->build({m.w});
    m.sgd->build({m.w});
    return m;
  };
  Model on_gpu = make(gpu);
  Model on_cpu = make(cpu);
  const auto step = [](Model& m) {
    const Tensor gradient = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f});
    m.adam->apply_gradients({{gradient, m.w}});
    m.sgd->apply_gradients({{gradient, m.w}});
  };
  gpu.run([&] { step(on_gpu); });  // warm: communicators and output blocks exist
  cpu.run([&] { step(on_cpu); });

  std::atomic<bool> released{false};
  std::atomic<bool> done{false};
  // Releases the stream after 20 s if apply_gradients waits for it, so that the test fails, not hangs.
  std::thread releaser([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    released.store(true);
  });
  bool returned_while_held = false;
  gpu.run([&] {
    const Tensor gradient = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f});
    const auto hold = [](void* flag) {
      while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
    };
    ASSERT_EQ(cudaLaunchHostFunc(cuda::current_stream(), hold, &released), cudaSuccess);
    on_gpu.adam->apply_gradients({{gradient, on_gpu.w}});
    on_gpu.sgd->apply_gradients({{gradient, on_gpu.w}});
    returned_while_held = !released.load();
    released.store(true);
  });
  done.store(true);
  releaser.join();
  EXPECT_TRUE(returned_while_held) << "apply_gradients waited for the replica's stream";
  cpu.run([&] { step(on_cpu); });

  EXPECT_EQ(on_gpu.adam->iterations().value().item<std::int64_t>(), 2);
  EXPECT_EQ(on_gpu.sgd->iterations().value().item<std::int64_t>(), 2);
  const std::vector<float> got = on_gpu.w.component(0).to_vector<float>();
  const std::vector<float> expected = on_cpu.w.component(0).to_vector<float>();
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-6 * std::max(1.0f, std::abs(expected[i]))) << i;
}

// A checkpoint of variables on GPUs (weights and Adam's slots) saves them through the host and
// restores them into every replica's component.
TEST_F(OnGpu, CheckpointOfGpuVariablesRoundTrips) {
  split_gpu0(2);
  MirroredStrategy strategy({"GPU:0", "GPU:1"});
  Variable w;
  std::unique_ptr<optimizers::Adam> adam;
  {
    StrategyScope scope = strategy.scope();
    w = Variable(Tensor::from_vector<float>({1, 2, 3}), {.name = "w"});
    adam = std::make_unique<optimizers::Adam>(0.1);
  }
  const auto step = [&] {
    strategy.run([&] { adam->apply_gradients({{Tensor::from_vector<float>({0.5f, -1.0f, 2.0f}), w}}); });
  };
  step();
  std::vector<std::pair<std::string, Variable>> saved = {{"w", w}};
  for (const Variable& v : adam->variables()) saved.emplace_back(v.name(), v);
  Checkpoint checkpoint(saved);
  const std::string path = ::testing::TempDir() + "gpu_variables.safetensors";
  checkpoint.save(path);
  const std::vector<float> at_save = w.component(0).to_vector<float>();
  step();
  step();
  ASSERT_NE(w.component(1).to_vector<float>(), at_save);
  checkpoint.restore(path);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(w.component(r).device(), Device::gpu(r));
    EXPECT_EQ(w.component(r).to_vector<float>(), at_save) << "replica " << r;
  }
  EXPECT_EQ(adam->iterations().value().to_vector<std::int64_t>(), (std::vector<std::int64_t>{1}));
  step();  // the restored slots and step count carry on as after the first step
  Variable fresh;
  std::unique_ptr<optimizers::Adam> reference;
  {
    StrategyScope scope = strategy.scope();
    fresh = Variable(Tensor::from_vector<float>({1, 2, 3}), {.name = "w"});
    reference = std::make_unique<optimizers::Adam>(0.1);
  }
  for (int k = 0; k < 2; ++k) {
    strategy.run([&] { reference->apply_gradients({{Tensor::from_vector<float>({0.5f, -1.0f, 2.0f}), fresh}}); });
  }
  EXPECT_EQ(w.component(0).to_vector<float>(), fresh.component(0).to_vector<float>());
}

// experimental_distribute_dataset places each replica's rows on that replica's GPU (read there by
// the replica's step), or leaves them in host memory when fetch_to_device is off.
void expect_batches_on_each_replicas_gpu(MirroredStrategy& strategy) {
  const int n = strategy.num_replicas_in_sync();
  const auto ds = data::range(8 * n).batch(4 * n);
  std::vector<std::int64_t> seen;
  for (auto batch : strategy.experimental_distribute_dataset(ds)) {
    auto sums = strategy.run([](const Tensor& local) {
      EXPECT_EQ(local.device(), get_replica_context()->device());
      return get_replica_context()->all_reduce(ReduceOp::kSum, local);
    }, batch);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(batch[r].device(), strategy.extended().worker_devices()[static_cast<std::size_t>(r)]);
      for (std::int64_t v : batch[r].to_vector<std::int64_t>()) seen.push_back(v);
    }
    EXPECT_TRUE(sums[0].device().is_gpu());
  }
  std::vector<std::int64_t> all(static_cast<std::size_t>(8 * n));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
  InputOptions on_host;
  on_host.experimental_fetch_to_device = false;
  const PerReplica<Tensor> host = strategy.experimental_distribute_dataset(ds, on_host).make_iterator().get_next();
  for (const Tensor& t : host.values()) EXPECT_TRUE(t.device().is_cpu());
}

TEST_F(OnGpu, DistributedBatchesAreFetchedToEachPhysicalGpu) {
  MirroredStrategy strategy;
  expect_batches_on_each_replicas_gpu(strategy);
}

TEST_F(OnGpu, DistributedBatchesAreFetchedToLogicalGpus) {
  split_gpu0(2);
  MirroredStrategy strategy({"GPU:0", "GPU:1"});
  expect_batches_on_each_replicas_gpu(strategy);
}
#endif  // DISTRIBUTE_HAS_CUDA

}  // namespace
}  // namespace distribute
