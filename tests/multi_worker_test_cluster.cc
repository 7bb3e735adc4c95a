// Cluster resolvers and layouts (multi_worker_test.cc): resolvers that do not match the launch, TF's
// placement of a chief and other tasks, and strategies on sub-communicators.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/mpi/mpi_cluster_resolver.h"
#include "multi_worker_test.h"

namespace distribute {
namespace {

using testing::local_devices;
using testing::MultiWorker;
using testing::strategy;

// A resolver that lists one worker more than were launched; this process is task `task`.
class OneTaskTooMany : public ClusterResolver {
 public:
  OneTaskTooMany(int workers, int task) : workers_(workers), task_(task) {}
  ClusterSpec cluster_spec() const override {
    return ClusterSpec({{"worker", std::vector<std::string>(static_cast<std::size_t>(workers_) + 1, "localhost")}});
  }
  std::string task_type() const override { return "worker"; }
  int task_id() const override { return task_; }

 private:
  int workers_;
  int task_;
};

// mpirun's processes meet over MPI, plain processes over Gloo, whose default resolver reads the
// launcher's RANK and WORLD_SIZE; the strategy's name says which.
TEST_F(MultiWorker, TheBackendIsMpiUnderMpirunAndGlooForPlainProcesses) {
  const bool mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  EXPECT_EQ(s.backend(), mpirun ? CollectiveBackend::kMpi : CollectiveBackend::kGloo);
  EXPECT_THAT(s.name(), ::testing::HasSubstr(" of " + std::to_string(workers()) + " over " +
                                             (mpirun ? "MPI" : "Gloo") + ": "));
  if (!mpirun) {
    EXPECT_NE(dynamic_cast<const EnvironmentClusterResolver*>(&s.cluster_resolver()), nullptr);
    EXPECT_EQ(s.cluster_resolver().rendezvous_address(), std::getenv("DISTRIBUTE_RENDEZVOUS"));
  }
}

// Over MPI the launched processes are the workers, and a resolver that lists others is refused;
// over Gloo the resolver is the job's only description, and the workers wait at the store for the
// one that never comes.
TEST_F(MultiWorker, ResolverListingOtherTasksThanLaunchedIsAnInvalidArgument) {
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.cluster_resolver = std::make_shared<OneTaskTooMany>(workers(), worker());
  if (!over_mpi()) {
    options.gloo.rendezvous_timeout = std::chrono::seconds(1);
    try {
      MultiWorkerMirroredStrategy waiting(options);
      ADD_FAILURE() << "no error";
    } catch (const DeadlineExceededError& e) {
      EXPECT_EQ(std::string(e.what()), "GlooWorkerTransport: worker " + std::to_string(worker()) +
                                           " waited 1000 ms at the rendezvous store for workers " +
                                           std::to_string(workers()) + " of " + std::to_string(workers() + 1) +
                                           ", which did not arrive");
    }
    expect_still_usable();
    return;
  }
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
  if (!over_mpi()) GTEST_SKIP() << "MPI's communicators; over Gloo, StrategiesBuiltInALoopCloseTheirConnections";
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

// Over Gloo each strategy has its own connections to every other worker (and a thread of Gloo's):
// strategies built and destroyed in a loop leave no descriptor open.
TEST_F(MultiWorker, StrategiesBuiltInALoopCloseTheirConnections) {
  if (over_mpi()) GTEST_SKIP() << "Gloo's connections; over MPI, StrategiesBuiltInALoopFreeTheirCommunicators";
  const auto open_descriptors = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"), std::filesystem::directory_iterator{});
  };
  MultiWorkerMirroredStrategyOptions options;
  for (int l = 0; l < local(); ++l) options.local_devices.push_back("CPU:" + std::to_string(l));
  options.communication.timeout = std::chrono::seconds(20);
  const auto build_and_run = [&](int i) {
    MultiWorkerMirroredStrategy loop(options);
    PerReplica<float> sum = loop.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    EXPECT_EQ(sum[0], static_cast<float>(n())) << "strategy " << i;
  };
  build_and_run(0);
  const auto before = open_descriptors();
  for (int i = 1; i <= 20; ++i) build_and_run(i);
  EXPECT_EQ(open_descriptors(), before);
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
  // A task of the job whose worker is another process's rank (over Gloo the resolver gives the rank).
  if (workers() > 1 && over_mpi()) {
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

// Constructs a strategy with `resolver`, which describes TF's layout with a chief, and checks that
// the chief is worker 0, then the "worker" tasks in order (this process being `worker` of
// `workers`), and that it reduces across them. The resolver's hosts are made up: over Gloo every
// worker accepts its peers on loopback instead, or where the multi-host harness has them meet
// across hosts, on the interface it names (GLOO_SOCKET_IFNAME).
void expect_chief_layout_strategy(std::shared_ptr<const ClusterResolver> resolver, int worker, int workers) {
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = local_devices();
  options.cluster_resolver = std::move(resolver);
  if (std::getenv("GLOO_SOCKET_IFNAME") == nullptr) options.gloo.hostname = "127.0.0.1";
  MultiWorkerMirroredStrategy with_chief(options);
  EXPECT_EQ(with_chief.extended().worker_id(), worker);
  EXPECT_EQ(with_chief.extended().num_workers(), workers);
  EXPECT_EQ(with_chief.extended().should_checkpoint(), worker == 0);  // TF's is_chief
  EXPECT_EQ(with_chief.cluster_resolver().task_type(), worker == 0 ? "chief" : "worker");
  const PerReplica<int> ids = with_chief.run([] {
    ReplicaContext& ctx = *get_replica_context();
    return ctx.all_reduce(ReduceOp::kSum, ctx.replica_id_in_sync_group());
  });
  const int n = with_chief.num_replicas_in_sync();
  for (int l = 0; l < with_chief.extended().num_local_replicas(); ++l) EXPECT_EQ(ids[l], n * (n - 1) / 2);
}

TEST_F(MultiWorker, AClusterWithAChiefHasTheChiefAsWorkerZeroThenTheWorkersInOrder) {
  expect_chief_layout_strategy(chief_layout_task(workers(), worker()), worker(), workers());
  // Evaluator and parameter-server tasks may be listed; they are no workers.
  expect_chief_layout_strategy(
      chief_layout_task(workers(), worker(), {{"evaluator", {"eval0"}}, {"ps", {"ps0", "ps1"}}}), worker(), workers());
  expect_still_usable();
}

// The launchers' resolvers, as each process of the job would read them: TF_CONFIG naming this
// process's task, and the variables srun would set in task `worker()` (one task per node).
TEST_F(MultiWorker, TFConfigAndSlurmResolversDescribeTheJobMpiLaunched) {
  std::string cluster = R"({"cluster": {"chief": ["host0:2222"], "worker": [)";
  for (int w = 1; w < workers(); ++w) cluster += (w > 1 ? ", " : "") + ("\"host" + std::to_string(w) + ":2222\"");
  const std::string task = worker() == 0 ? R"({"type": "chief", "index": 0})"
                                         : R"({"type": "worker", "index": )" + std::to_string(worker() - 1) + "}";
  const std::string tf_config = cluster + "]}, \"task\": " + task + "}";
  expect_chief_layout_strategy(
      std::make_shared<TFConfigClusterResolver>(TFConfigClusterResolverOptions{.tf_config = tf_config}), worker(),
      workers());

  const std::vector<std::pair<const char*, std::string>> slurm = {
      {"SLURM_PROCID", std::to_string(worker())},
      {"SLURM_STEP_NUM_TASKS", std::to_string(workers())},
      {"SLURM_STEP_NODELIST", "node[1-" + std::to_string(workers()) + "]"},
      {"SLURM_STEP_TASKS_PER_NODE", "1(x" + std::to_string(workers()) + ")"}};
  for (const auto& [name, value] : slurm) setenv(name, value.c_str(), 1);
  std::vector<std::pair<std::string, int>> jobs = {{"chief", 1}};
  if (workers() > 1) jobs.emplace_back("worker", workers() - 1);
  expect_chief_layout_strategy(std::make_shared<SlurmClusterResolver>(SlurmClusterResolverOptions{.jobs = jobs}),
                               worker(), workers());
  for (const auto& [name, value] : slurm) unsetenv(name);
  expect_still_usable();
}

// A TFConfigClusterResolver made where TF_CONFIG is unset, or names no task, describes no worker.
TEST_F(MultiWorker, TFConfigThatDescribesNoTaskIsRefusedSayingSo) {
  expect_resolver_refused(
      std::make_shared<TFConfigClusterResolver>(TFConfigClusterResolverOptions{.tf_config = ""}),
      "MultiWorkerMirroredStrategy: the cluster resolver's spec lists no jobs (a TFConfigClusterResolver reads them "
      "from TF_CONFIG's \"cluster\": is TF_CONFIG set in this process?); describe every chief and worker task");
  expect_resolver_refused(
      std::make_shared<TFConfigClusterResolver>(
          TFConfigClusterResolverOptions{.tf_config = R"({"cluster": {"worker": ["a:1"]}})"}),
      "MultiWorkerMirroredStrategy: the cluster resolver names no task for this process (a TFConfigClusterResolver "
      "reads it from TF_CONFIG's \"task\"); set it, {\"type\": \"worker\", \"index\": i}, or the resolver's "
      "task_type and task_id");
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
  // Each process names the task of the next rank (over Gloo the resolver gives the rank).
  if (workers() > 1 && over_mpi()) {
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
  if (!over_mpi()) GTEST_SKIP() << "MPI's sub-communicators";
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

}  // namespace
}  // namespace distribute
