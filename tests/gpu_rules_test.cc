// The GPU backend's rules, run everywhere (no GPU needed): logical GPUs, the choice of
// cross-device ops, the mapping of CUDA and NCCL failures to typed errors, the no-GPU paths, and
// zero-copy views of user memory. tests/gpu_test.cc runs GPU replicas for real.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "device/gpu_topology.h"
#include "distribute/config.h"
#include "distribute/device/gpu.h"
#include "distribute/distribute.h"
#include "strategy/cross_device_ops.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

#if DISTRIBUTE_HAS_CUDA
#include <cuda_runtime_api.h>

#include "device/cuda/cuda_error.h"
#endif
#if DISTRIBUTE_HAS_NCCL
#include "collective/nccl/nccl_error.h"
#endif

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;


TEST(GpuTopology, EachPhysicalGpuIsOneLogicalGpuByDefault) {
  detail::GpuTopology topology(2);
  EXPECT_EQ(topology.num_logical(), 2);
  EXPECT_EQ(topology.physical_of(Device::gpu(0)), 0);
  EXPECT_EQ(topology.physical_of(Device::gpu(1)), 1);
  EXPECT_EQ(topology.memory_limit(Device::gpu(1)), 0u);
}

TEST(GpuTopology, LogicalGpusAreNumberedPhysicalGpuByPhysicalGpu) {
  detail::GpuTopology topology(2);
  topology.configure(1, {{.memory_limit = 100}, {.memory_limit = 200}, {}});
  EXPECT_EQ(topology.num_logical(), 4);
  EXPECT_EQ(topology.physical_of(Device::gpu(0)), 0);
  EXPECT_EQ(topology.physical_of(Device::gpu(1)), 1);
  EXPECT_EQ(topology.physical_of(Device::gpu(3)), 1);
  EXPECT_EQ(topology.memory_limit(Device::gpu(1)), 100u);
  EXPECT_EQ(topology.memory_limit(Device::gpu(2)), 200u);
  EXPECT_EQ(topology.memory_limit(Device::gpu(3)), 0u);
}

TEST(GpuTopology, ConfigurationIsFixedByFirstUse) {
  detail::GpuTopology topology(1);
  topology.configure(0, {{}, {}});
  topology.configure(0, {{}, {}, {}});  // still allowed: nothing used a GPU yet
  EXPECT_EQ(topology.physical_of(Device::gpu(2)), 0);
  expect_error<FailedPreconditionError>([&] { topology.configure(0, {{}}); },
                                        {"set_logical_device_configuration: GPUs are already in use",
                                         "before any strategy or tensor uses a GPU"});
}

TEST(GpuTopology, BadConfigurationsAndMissingGpus) {
  detail::GpuTopology topology(1);
  expect_error<OutOfRangeError>([&] { topology.configure(1, {{}}); },
                                {"physical GPU 1 does not exist", "1 physical GPU(s) are visible"});
  expect_error<InvalidArgumentError>([&] { topology.configure(0, {}); },
                                     {"the list of logical devices for physical GPU 0 is empty"});
  expect_error<OutOfRangeError>([&] { (void)topology.physical_of(Device::gpu(1)); },
                                {"GPU:1 does not exist: 1 logical GPU(s) are visible", "list_logical_gpus()"});
}

constexpr CommunicationImplementation kAutoImpl = CommunicationImplementation::kAuto;

TEST(CrossDeviceOpsChoice, CpuDevices) {
  const std::vector<Device> cpus = {Device::cpu(0), Device::cpu(1)};
  const std::vector<int> none = {-1, -1};
  EXPECT_EQ(detail::choose_backend(CrossDeviceOps::kAuto, kAutoImpl, cpus, none, true), detail::Backend::kSharedMemory);
  EXPECT_EQ(detail::choose_backend(CrossDeviceOps::kReductionToOneDevice, kAutoImpl, cpus, none, true),
            detail::Backend::kReductionToOneDevice);
  expect_error<InvalidArgumentError>(
      [&] { detail::choose_backend(CrossDeviceOps::kNcclAllReduce, kAutoImpl, cpus, none, true); },
      {"CrossDeviceOps::kNcclAllReduce needs GPU devices and CPU:0 is a CPU"});
}

TEST(CrossDeviceOpsChoice, DistinctPhysicalGpus) {
  const std::vector<Device> gpus = {Device::gpu(0), Device::gpu(1)};
  const std::vector<int> physical = {0, 1};
  EXPECT_EQ(detail::choose_backend(CrossDeviceOps::kAuto, kAutoImpl, gpus, physical, true), detail::Backend::kNccl);
  EXPECT_EQ(detail::choose_backend(CrossDeviceOps::kNcclAllReduce, kAutoImpl, gpus, physical, true), detail::Backend::kNccl);
  EXPECT_EQ(detail::choose_backend(CrossDeviceOps::kReductionToOneDevice, kAutoImpl, gpus, physical, true),
            detail::Backend::kReductionToOneDevice);
  // Without NCCL in the build, kAuto falls back and an explicit request says why it cannot.
  EXPECT_EQ(detail::choose_backend(CrossDeviceOps::kAuto, kAutoImpl, gpus, physical, false),
            detail::Backend::kReductionToOneDevice);
  expect_error<UnimplementedError>([&] { detail::choose_backend(CrossDeviceOps::kNcclAllReduce, kAutoImpl, gpus, physical, false); },
                                   {"kNcclAllReduce needs NCCL", "-DDISTRIBUTE_WITH_NCCL=ON"});
}

TEST(CrossDeviceOpsChoice, LogicalGpusOfOnePhysicalGpu) {
  const std::vector<Device> gpus = {Device::gpu(0), Device::gpu(1), Device::gpu(2)};
  const std::vector<int> physical = {0, 1, 1};
  EXPECT_EQ(detail::choose_backend(CrossDeviceOps::kAuto, kAutoImpl, gpus, physical, true),
            detail::Backend::kReductionToOneDevice);
  expect_error<InvalidArgumentError>(
      [&] { detail::choose_backend(CrossDeviceOps::kNcclAllReduce, kAutoImpl, gpus, physical, true); },
      {"kNcclAllReduce cannot run GPU:1 and GPU:2", "both are logical GPUs of physical GPU 1",
       "use kReductionToOneDevice or kAuto"});
}

// A strategy's default CommunicationOptions::implementation picks its backend, or contradicts
// cross_device_ops.
TEST(CrossDeviceOpsChoice, ImplementationPicksTheBackend) {
  const std::vector<Device> cpus = {Device::cpu(0), Device::cpu(1)};
  const std::vector<int> none = {-1, -1};
  const std::vector<Device> gpus = {Device::gpu(0), Device::gpu(1)};
  const std::vector<int> physical = {0, 1};
  using enum CommunicationImplementation;
  EXPECT_EQ(detail::choose_backend(CrossDeviceOps::kAuto, kRing, cpus, none, true), detail::Backend::kSharedMemory);
  EXPECT_EQ(detail::choose_backend(CrossDeviceOps::kAuto, kNccl, gpus, physical, true), detail::Backend::kNccl);
  expect_error<InvalidArgumentError>([&] { detail::choose_backend(CrossDeviceOps::kAuto, kNccl, cpus, none, true); },
                                     {"kNcclAllReduce needs GPU devices and CPU:0 is a CPU"});
  expect_error<InvalidArgumentError>([&] { detail::choose_backend(CrossDeviceOps::kAuto, kRing, gpus, physical, true); },
                                     {"implementation is RING (through host memory) but the replicas run on GPU:0"});
  expect_error<InvalidArgumentError>(
      [&] { detail::choose_backend(CrossDeviceOps::kReductionToOneDevice, kNccl, gpus, physical, true); },
      {"implementation is NCCL but cross_device_ops is kReductionToOneDevice"});
  expect_error<InvalidArgumentError>(
      [&] { detail::choose_backend(CrossDeviceOps::kReductionToOneDevice, kRing, cpus, none, true); },
      {"implementation is RING but cross_device_ops is not kAuto"});
  expect_error<UnimplementedError>([&] { detail::choose_backend(CrossDeviceOps::kAuto, kNccl, gpus, physical, false); },
                                   {"kNcclAllReduce needs NCCL"});
}

TEST(CrossDeviceOpsChoice, StrategiesReportTheirBackend) {
  EXPECT_EQ(MirroredStrategy(cpu_devices(2)).cross_device_ops(), "SharedMemoryAllReduce");
  MirroredStrategyOptions options;
  options.cross_device_ops = CrossDeviceOps::kReductionToOneDevice;
  EXPECT_EQ(MirroredStrategy(cpu_devices(3), options).cross_device_ops(), "ReductionToOneDevice");
  options.cross_device_ops = CrossDeviceOps::kNcclAllReduce;
  expect_error<InvalidArgumentError>([&] { MirroredStrategy strategy(cpu_devices(2), options); },
                                     {"kNcclAllReduce needs GPU devices"});
}

TEST(Devices, MixingCpusAndGpusIsRejected) {
  expect_error<InvalidArgumentError>([] { MirroredStrategy strategy({"CPU:0", "GPU:0"}); },
                                     {"devices CPU:0 and GPU:0 mix CPUs and GPUs"});
}

TEST(Devices, WithoutGpusTheDefaultStrategyDeviceIsTheCpu) {
  if (num_physical_gpus() > 0) GTEST_SKIP() << "GPUs are visible";
  EXPECT_FALSE(gpu_unavailable_reason().empty());
  EXPECT_TRUE(list_logical_gpus().empty());
  MirroredStrategy strategy;
  EXPECT_EQ(strategy.name(), "MirroredStrategy(CPU:0)");
}

TEST(Devices, GpusThatDoNotExist) {
  if (!DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has no GPU backend";
  const std::string missing = "GPU:" + std::to_string(static_cast<int>(list_logical_gpus().size()));
  const std::vector<std::string> words = {missing + " does not exist", "logical GPU(s) are visible"};
  expect_error<OutOfRangeError>([&] { MirroredStrategy strategy({missing}); }, words);
  expect_error<OutOfRangeError>([&] { OneDeviceStrategy strategy(missing); }, words);
  expect_error<OutOfRangeError>([&] { (void)Tensor::empty(DType::kFloat32, Shape{2}, Device::parse(missing)); },
                                words);
  expect_error<OutOfRangeError>([&] { (void)physical_gpu_of(Device::parse(missing)); }, words);
}

TEST(Devices, LogicalConfigurationOfAMissingGpu) {
  if (!DISTRIBUTE_HAS_CUDA) {
    expect_error<UnimplementedError>([] { set_logical_device_configuration(0, {{}, {}}); },
                                     {"this build of distribute has no GPU backend"});
    return;
  }
  const int missing = num_physical_gpus();
  expect_error<OutOfRangeError>([&] { set_logical_device_configuration(missing, {{}, {}}); },
                                {"physical GPU " + std::to_string(missing) + " does not exist"});
}

TEST(Devices, CurrentStreamOutsideReplicasIsTheLegacyStream) {
  if (!DISTRIBUTE_HAS_CUDA) {
    EXPECT_EQ(cuda::current_stream(), nullptr);
    return;
  }
#if DISTRIBUTE_HAS_CUDA
  EXPECT_EQ(cuda::current_stream(), cudaStreamLegacy);
#endif
}

TEST(FromBlob, AllReduceReadsTheCallersHostBufferWithoutACopy) {
  std::vector<std::vector<float>> buffers = {{1, 2, 3}, {10, 20, 30}};
  PerReplica<Tensor> inputs({Tensor::from_blob(buffers[0].data(), DType::kFloat32, Shape{3}, Device::cpu(0)),
                             Tensor::from_blob(buffers[1].data(), DType::kFloat32, Shape{3}, Device::cpu(1))});
  EXPECT_EQ(inputs[0].raw_data(), buffers[0].data());
  MirroredStrategy strategy(cpu_devices(2));
  PerReplica<Tensor> sums = strategy.run(
      [](const Tensor& mine) { return get_replica_context()->all_reduce(ReduceOp::kSum, mine); }, inputs);
  EXPECT_EQ(sums[0].to_vector<float>(), (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(sums[1].to_vector<float>(), (std::vector<float>{11, 22, 33}));
  buffers[0][0] = 5;  // a view, not a copy
  EXPECT_EQ(inputs[0].to_vector<float>()[0], 5.0f);
}

TEST(FromBlob, NullDataIsRejected) {
  expect_error<InvalidArgumentError>(
      [] { (void)Tensor::from_blob(nullptr, DType::kFloat32, Shape{2}, Device::cpu()); },
      {"Tensor::from_blob: null data for shape (2,)"});
  EXPECT_EQ(Tensor::from_blob(nullptr, DType::kInt32, Shape{0}, Device::cpu()).num_elements(), 0);
}

TEST(DefaultDevice, TensorsCreatedInAReplicaLiveOnItsDevice) {
  EXPECT_EQ(default_device(), Device::cpu(0));
  MirroredStrategy strategy(cpu_devices(3));
  PerReplica<Tensor> made = strategy.run([] { return Tensor::from_vector<int>({1}); });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(made[r].device(), Device::cpu(r));
}

#if DISTRIBUTE_HAS_CUDA
TEST(CudaErrors, MapToTypedErrors) {
  EXPECT_EQ(detail::gpu::cuda_error_code(cudaErrorMemoryAllocation), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(detail::gpu::cuda_error_code(cudaErrorInsufficientDriver), absl::StatusCode::kUnavailable);
  EXPECT_EQ(detail::gpu::cuda_error_code(cudaErrorNoDevice), absl::StatusCode::kUnavailable);
  EXPECT_EQ(detail::gpu::cuda_error_code(cudaErrorInvalidDevicePointer), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(detail::gpu::cuda_error_code(cudaErrorIllegalAddress), absl::StatusCode::kInternal);
  expect_error<ResourceExhaustedError>(
      [] { detail::gpu::throw_cuda_error(cudaErrorMemoryAllocation, "allocating 8 bytes on GPU:0"); },
      {"allocating 8 bytes on GPU:0: CUDA error cudaErrorMemoryAllocation (out of memory)"});
  expect_error<InternalError>([] { detail::gpu::throw_cuda_error(cudaErrorIllegalAddress, "reducing"); },
                              {"reducing: CUDA error cudaErrorIllegalAddress", "restart the process"});
  expect_error<UnavailableError>([] { detail::gpu::throw_cuda_error(cudaErrorInsufficientDriver, "starting"); },
                                 {"starting: CUDA error cudaErrorInsufficientDriver"});
}
#endif

#if DISTRIBUTE_HAS_NCCL
TEST(NcclErrors, MapToTypedErrors) {
  using collective::nccl::nccl_error_code;
  EXPECT_EQ(nccl_error_code(ncclInvalidArgument), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(nccl_error_code(ncclInvalidUsage), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nccl_error_code(ncclSystemError), absl::StatusCode::kUnavailable);
  EXPECT_EQ(nccl_error_code(ncclRemoteError), absl::StatusCode::kUnavailable);
  EXPECT_EQ(nccl_error_code(ncclUnhandledCudaError), absl::StatusCode::kInternal);
  expect_error<UnavailableError>(
      [] { collective::nccl::throw_nccl_error(ncclSystemError, nullptr, "all_reduce #1 on replica 0"); },
      {"all_reduce #1 on replica 0: NCCL error 2 (unhandled system error"});
}
#endif

}  // namespace
}  // namespace distribute
