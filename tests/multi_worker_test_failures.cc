// Workers that differ, raise or leave (multi_worker_test.cc): errors that name the worker and its
// replicas on every worker, after which the strategy stays usable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/mpi/mpi_cluster_resolver.h"
#include "multi_worker_test.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::g_device_type;
using testing::g_first_gpu;
using testing::local_device;
using testing::local_devices;
using testing::MultiWorker;
using testing::strategy;

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

// Worker 1 arrives at a collective after the others gave up on it (their timeout passed): over MPI
// it is told so, with DeadlineExceededError naming them (over Gloo it times out waiting for them),
// and never starts the data phase alone; the job goes on (no MPI_Abort) and the strategy is
// unusable on every worker.
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
    if (late && !over_mpi()) {
      // Over Gloo no note crosses: the late worker waits for the others until its own timeout.
      EXPECT_THAT(e.what(), HasSubstr("timed out after 1 s: " + workers_text(others) + " did not arrive while " +
                                      workers_text(1, 1) + " waits in all_reduce #1"));
    } else if (late) {
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

}  // namespace
}  // namespace distribute
