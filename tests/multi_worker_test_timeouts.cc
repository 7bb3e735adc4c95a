// Options and timeouts across workers (multi_worker_test.cc): invalid options, the kFailStrategy
// mode, and a worker that does not arrive, on CPUs and on GPUs. Last of the binary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/mpi/mpi_cluster_resolver.h"
#include "multi_worker_test.h"
#include "testing/error_expect.h"
#if DISTRIBUTE_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace distribute {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::expect_error;
using testing::g_device_type;
using testing::local_devices;
using testing::MultiWorker;
using testing::strategy;

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

// A backend out of the enum, and Gloo asked for with MPI's resolver, are refused on every worker
// before any of them meets another.
TEST_F(MultiWorker, ABackendThatCannotServeTheOptionsIsAnInvalidArgument) {
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.backend = static_cast<CollectiveBackend>(7);
  const auto refusal = [&] {
    return expect_error<InvalidArgumentError>([&] { MultiWorkerMirroredStrategy refused(options); }, {});
  };
  EXPECT_EQ(refusal(), "MultiWorkerMirroredStrategy: options.backend is 7, which is no CollectiveBackend (kAuto, kMpi "
                       "or kGloo)");
  if (over_mpi()) {
    options.backend = CollectiveBackend::kGloo;
    options.cluster_resolver = std::make_shared<MpiClusterResolver>();
    EXPECT_EQ(refusal(), "MultiWorkerMirroredStrategy: options.backend is kGloo but the cluster resolver is an "
                         "MpiClusterResolver, whose workers are MPI's ranks; choose kMpi, or describe the job with a "
                         "TFConfigClusterResolver or EnvironmentClusterResolver");
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
  if (strategy().backend() != CollectiveBackend::kMpi) GTEST_SKIP() << "MPI's communicators";
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
  EXPECT_THAT(expect_error<DeadlineExceededError>([&] { stalled.run(step); }, {}),
              ContainsRegex("did not finish; its collectives were aborted|NCCL did not take all_reduce #1 "
                            "within [15] s|did not arrive while"));
  EXPECT_THAT(expect_error<UnavailableError>([&] { stalled.run(step); }, {}),
              ContainsRegex("the NCCL communicator spanning the workers was aborted|collectives are unusable "
                            "after an earlier failure"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  expect_still_usable();
}
#endif

}  // namespace
}  // namespace distribute
