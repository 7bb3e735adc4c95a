// The resolvers that read a job from its launcher: TF_CONFIG (TFConfigClusterResolver), Slurm's
// variables (SlurmClusterResolver) and a launcher's RANK and WORLD_SIZE (EnvironmentClusterResolver),
// with TF's examples and every error they raise. The strategy
// that takes them across processes is tested in multi_worker_test_cluster.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distribute/distribute.h"

namespace distribute {
namespace {

using Jobs = std::map<std::string, std::vector<std::string>>;

Jobs jobs_of(const ClusterSpec& spec) {
  Jobs jobs;
  for (const std::string& job : spec.jobs()) jobs[job] = spec.job_tasks(job);
  return jobs;
}

// Sets environment variables for one test and restores them after it.
class ScopedEnvironment {
 public:
  ScopedEnvironment(std::initializer_list<std::pair<const char*, std::optional<std::string>>> values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old == nullptr ? std::nullopt : std::optional<std::string>(old));
      set(name, value);
    }
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) set(name, value);
  }

 private:
  static void set(const char* name, const std::optional<std::string>& value) {
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

template <class Error, class F>
std::string error_of(F&& make) {
  try {
    make();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(TFConfigClusterResolver, ReadsTheClusterAndTaskOfTFsExample) {
  ScopedEnvironment env({{"TF_CONFIG",
                          R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]},
                              "task": {"type": "worker", "index": 0}})"}});
  const TFConfigClusterResolver resolver;
  EXPECT_EQ(jobs_of(resolver.cluster_spec()), (Jobs{{"worker", {"localhost:12345", "localhost:23456"}}}));
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 0);
  EXPECT_EQ(resolver.rpc_layer(), "");
  EXPECT_EQ(resolver.environment(), "");
}

TEST(TFConfigClusterResolver, KeepsEveryJobAndTheRpcLayerAndEnvironment) {
  const TFConfigClusterResolver resolver({.tf_config = R"({
      "cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"], "evaluator": ["host3:2222"],
                  "ps": ["host4:2222"]},
      "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc", "environment": "cloud"})"});
  EXPECT_EQ(jobs_of(resolver.cluster_spec()), (Jobs{{"chief", {"host0:2222"}},
                                                    {"evaluator", {"host3:2222"}},
                                                    {"ps", {"host4:2222"}},
                                                    {"worker", {"host1:2222", "host2:2222"}}}));
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 1);
  EXPECT_EQ(resolver.rpc_layer(), "grpc");
  EXPECT_EQ(resolver.environment(), "cloud");
}

TEST(TFConfigClusterResolver, TaskTypeAndIdGivenReplaceTFConfigs) {
  const TFConfigClusterResolver resolver({.tf_config = R"({"cluster": {"chief": ["a:1"], "worker": ["b:1"]},
                                                           "task": {"type": "worker", "index": 0}})",
                                          .task_type = "chief",
                                          .task_id = 0});
  EXPECT_EQ(resolver.task_type(), "chief");
  EXPECT_EQ(resolver.task_id(), 0);
}

// TF reads the index with int(), so "1" is task 1 as well.
TEST(TFConfigClusterResolver, TakesTheIndexAsDigitsToo) {
  const TFConfigClusterResolver resolver({.tf_config = R"({"cluster": {"worker": ["a:1", "b:1"]},
                                                           "task": {"type": "worker", "index": "1"}})"});
  EXPECT_EQ(resolver.task_id(), 1);
}

TEST(TFConfigClusterResolver, WithoutTFConfigTheSpecIsEmptyAndNoTaskIsNamed) {
  ScopedEnvironment env({{"TF_CONFIG", std::nullopt}});
  const TFConfigClusterResolver resolver;
  EXPECT_TRUE(resolver.cluster_spec().jobs().empty());
  EXPECT_EQ(resolver.task_type(), "");
  EXPECT_EQ(resolver.task_id(), 0);
}

TEST(TFConfigClusterResolver, TFConfigThatIsNoJsonIsAnInvalidArgument) {
  const std::string message = error_of<InvalidArgumentError>(
      [] { TFConfigClusterResolver({.tf_config = R"({"cluster": {"worker": ["a:1"]})"}); });
  EXPECT_EQ(message.rfind("TFConfigClusterResolver: TF_CONFIG is no JSON (", 0), 0u) << message;
  EXPECT_NE(message.find(R"(): {"cluster": {"worker": ["a:1"]})"), std::string::npos) << message;
}

TEST(TFConfigClusterResolver, PartsOfOtherTypesAreInvalidArgumentsNamingThem) {
  const auto error = [](std::string text) {
    return error_of<InvalidArgumentError>([&] { TFConfigClusterResolver({.tf_config = text}); });
  };
  EXPECT_EQ(error("[1, 2]"),
            R"(TFConfigClusterResolver: TF_CONFIG is [1,2]; it is a JSON object with "cluster" and "task")");
  EXPECT_EQ(error(R"({"cluster": ["a:1"]})"),
            R"(TFConfigClusterResolver: TF_CONFIG's "cluster" is ["a:1"]; it maps each job to the list of its )"
            R"(tasks' addresses, {"worker": ["host0:2222", "host1:2222"]})");
  EXPECT_EQ(error(R"({"cluster": {"worker": {"1": "a:1"}}})"),
            R"(TFConfigClusterResolver: TF_CONFIG's job "worker" is {"1":"a:1"}; give it the list of its tasks' )"
            R"(addresses (tasks numbered by their place in it: a job with gaps, as a map of task ids, has no )"
            R"(place among a strategy's workers))");
  EXPECT_EQ(error(R"({"cluster": {"worker": ["a:1", 2]}})"),
            R"(TFConfigClusterResolver: task 1 of TF_CONFIG's job "worker" is 2; a task's address is a string, )"
            R"("host:port")");
  EXPECT_EQ(error(R"({"task": "worker"})"),
            R"(TFConfigClusterResolver: TF_CONFIG's "task" is "worker"; it names this process's task, )"
            R"({"type": "worker", "index": 0})");
  EXPECT_EQ(error(R"({"task": {"type": 1}})"),
            R"(TFConfigClusterResolver: TF_CONFIG's "task" "type" is 1; it must be a string)");
  EXPECT_EQ(error(R"({"task": {"type": "worker", "index": "one"}})"),
            R"(TFConfigClusterResolver: TF_CONFIG's task "index" is "one"; it is the task's place in its job's )"
            R"(list, an integer)");
  EXPECT_EQ(error(R"({"rpc_layer": 3})"), R"(TFConfigClusterResolver: TF_CONFIG's "rpc_layer" is 3; it must be a string)");
}

TEST(SlurmHostlist, ExpandsRangesListsAndPaddingAsSlurmWritesThem) {
  EXPECT_EQ(detail::expand_slurm_hostlist("node[01-03,7],login,gpu[9-10]-ib", "V"),
            (std::vector<std::string>{"node01", "node02", "node03", "node7", "login", "gpu9-ib", "gpu10-ib"}));
  EXPECT_EQ(detail::expand_slurm_hostlist("r[1-2]n[1,3]", "V"),
            (std::vector<std::string>{"r1n1", "r1n3", "r2n1", "r2n3"}));
  EXPECT_EQ(detail::expand_slurm_hostlist("single", "V"), (std::vector<std::string>{"single"}));
  EXPECT_EQ(detail::expand_slurm_tasks_per_node("2(x3),1", "V"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(detail::expand_slurm_tasks_per_node("4", "V"), (std::vector<int>{4}));
}

TEST(SlurmHostlist, TextThatIsNoListIsAnInvalidArgumentNamingTheVariable) {
  EXPECT_EQ(error_of<InvalidArgumentError>([] { detail::expand_slurm_hostlist("node[1-2", "SLURM_STEP_NODELIST"); }),
            "SlurmClusterResolver: SLURM_STEP_NODELIST=node[1-2 opens a '[' it does not close");
  EXPECT_EQ(error_of<InvalidArgumentError>([] { detail::expand_slurm_hostlist("node[3-1]", "SLURM_STEP_NODELIST"); }),
            "SlurmClusterResolver: SLURM_STEP_NODELIST=node[3-1] has the range 3-1, which runs backwards");
  EXPECT_EQ(error_of<InvalidArgumentError>([] { detail::expand_slurm_hostlist("node[a-b]", "SLURM_STEP_NODELIST"); }),
            "SlurmClusterResolver: SLURM_STEP_NODELIST=node[a-b] has \"a\" where a node number belongs");
  EXPECT_EQ(error_of<InvalidArgumentError>(
                [] { detail::expand_slurm_tasks_per_node("2(x3", "SLURM_STEP_TASKS_PER_NODE"); }),
            "SlurmClusterResolver: SLURM_STEP_TASKS_PER_NODE=2(x3 has \"2(x3\", which is no count or count(xN)");
}

// The variables srun sets in task `rank` of 4 tasks, 2 on each of 2 nodes.
ScopedEnvironment slurm_step(int rank) {
  return ScopedEnvironment({{"SLURM_PROCID", std::to_string(rank)},
                            {"SLURM_STEP_NUM_TASKS", "4"},
                            {"SLURM_STEP_NODELIST", "node[1-2]"},
                            {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}});
}

TEST(SlurmClusterResolver, EveryTaskIsAWorkerAtItsNodesPorts) {
  ScopedEnvironment env = slurm_step(3);
  const SlurmClusterResolver resolver;
  EXPECT_EQ(jobs_of(resolver.cluster_spec()),
            (Jobs{{"worker", {"node1:8888", "node1:8889", "node2:8888", "node2:8889"}}}));
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 3);
}

TEST(SlurmClusterResolver, JobsTakeTheTasksInTheirOrder) {
  for (const auto& [rank, type, id] : {std::tuple{0, "chief", 0}, {1, "worker", 0}, {3, "worker", 2}}) {
    ScopedEnvironment env = slurm_step(rank);
    const SlurmClusterResolver resolver({.jobs = {{"chief", 1}, {"worker", 3}}, .port_base = 2222});
    EXPECT_EQ(jobs_of(resolver.cluster_spec()),
              (Jobs{{"chief", {"node1:2222"}}, {"worker", {"node1:2223", "node2:2222", "node2:2223"}}}));
    EXPECT_EQ(resolver.task_type(), type) << rank;
    EXPECT_EQ(resolver.task_id(), id) << rank;
  }
}

TEST(SlurmClusterResolver, TheJobsFormOfTheVariablesServesWithoutAStep) {
  ScopedEnvironment env({{"SLURM_PROCID", "1"},
                         {"SLURM_STEP_NUM_TASKS", std::nullopt},
                         {"SLURM_STEP_NODELIST", std::nullopt},
                         {"SLURM_STEP_TASKS_PER_NODE", std::nullopt},
                         {"SLURM_NTASKS", "2"},
                         {"SLURM_JOB_NODELIST", "a,b"},
                         {"SLURM_TASKS_PER_NODE", "1(x2)"}});
  const SlurmClusterResolver resolver;
  EXPECT_EQ(jobs_of(resolver.cluster_spec()), (Jobs{{"worker", {"a:8888", "b:8888"}}}));
  EXPECT_EQ(resolver.task_id(), 1);
}

TEST(SlurmClusterResolver, OutsideSlurmIsAFailedPrecondition) {
  ScopedEnvironment env({{"SLURM_PROCID", std::nullopt}});
  EXPECT_EQ(error_of<FailedPreconditionError>([] { SlurmClusterResolver resolver; }),
            "SlurmClusterResolver: SLURM_PROCID is not set: this process runs outside a Slurm job step; launch it "
            "with srun");
}

TEST(SlurmClusterResolver, VariablesThatDisagreeAreInvalidArguments) {
  {
    ScopedEnvironment env = slurm_step(0);
    ScopedEnvironment more({{"SLURM_STEP_NUM_TASKS", "5"}});
    EXPECT_EQ(error_of<InvalidArgumentError>([] { SlurmClusterResolver resolver; }),
              "SlurmClusterResolver: SLURM_STEP_TASKS_PER_NODE=2(x2) places 4 tasks but the step has 5");
  }
  {
    ScopedEnvironment env = slurm_step(0);
    ScopedEnvironment nodes({{"SLURM_STEP_NODELIST", "node[1-3]"}});
    EXPECT_EQ(error_of<InvalidArgumentError>([] { SlurmClusterResolver resolver; }),
              "SlurmClusterResolver: SLURM_STEP_NODELIST=node[1-3] names 3 nodes but SLURM_STEP_TASKS_PER_NODE=2(x2) "
              "gives tasks for 2");
  }
  {
    ScopedEnvironment env = slurm_step(0);
    ScopedEnvironment rank({{"SLURM_PROCID", "x"}});
    EXPECT_EQ(error_of<InvalidArgumentError>([] { SlurmClusterResolver resolver; }),
              "SlurmClusterResolver: SLURM_PROCID=x is no number");
  }
  {
    ScopedEnvironment env = slurm_step(0);
    EXPECT_EQ(error_of<InvalidArgumentError>([] { SlurmClusterResolver resolver({.jobs = {{"worker", 3}}}); }),
              "SlurmClusterResolver: options.jobs {worker: 3} has 3 tasks but the Slurm step has 4; give every task "
              "a job");
  }
}

TEST(EnvironmentClusterResolver, RankIsTheWorkerAndTheRendezvousIsKept) {
  ScopedEnvironment env({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"DISTRIBUTE_RENDEZVOUS", "redis://store:6379"}});
  const EnvironmentClusterResolver resolver;
  EXPECT_EQ(jobs_of(resolver.cluster_spec()), (Jobs{{"worker", {"", "", ""}}}));
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 2);
  EXPECT_EQ(resolver.rendezvous_address(), "redis://store:6379");
}

TEST(EnvironmentClusterResolver, ReadsTheVariablesItIsToldOf) {
  ScopedEnvironment env({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}, {"MY_STORE", "file:///shared/job"}});
  const EnvironmentClusterResolver resolver(
      {.rank_variable = "PMI_RANK", .world_size_variable = "PMI_SIZE", .rendezvous_variable = "MY_STORE"});
  EXPECT_EQ(resolver.cluster_spec().num_tasks("worker"), 1);
  EXPECT_EQ(resolver.task_id(), 0);
  EXPECT_EQ(resolver.rendezvous_address(), "file:///shared/job");
}

TEST(EnvironmentClusterResolver, WithoutARendezvousVariableTheAddressIsEmpty) {
  ScopedEnvironment env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"DISTRIBUTE_RENDEZVOUS", std::nullopt}});
  EXPECT_EQ(EnvironmentClusterResolver().rendezvous_address(), "");
}

TEST(EnvironmentClusterResolver, UnsetVariablesAreAFailedPrecondition) {
  {
    ScopedEnvironment env({{"RANK", "0"}, {"WORLD_SIZE", std::nullopt}});
    EXPECT_EQ(error_of<FailedPreconditionError>([] { EnvironmentClusterResolver resolver; }),
              "EnvironmentClusterResolver: WORLD_SIZE is not set: it is the number of workers, which the launcher "
              "sets in each worker (torchrun does; for workers started by a shell loop, set RANK and WORLD_SIZE "
              "yourself)");
  }
  ScopedEnvironment env({{"RANK", std::nullopt}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(error_of<FailedPreconditionError>([] { EnvironmentClusterResolver resolver; }),
            "EnvironmentClusterResolver: RANK is not set: it is this worker's rank, which the launcher sets in each "
            "worker (torchrun does; for workers started by a shell loop, set RANK and WORLD_SIZE yourself)");
}

TEST(EnvironmentClusterResolver, ValuesThatAreNoRankOfTheJobAreInvalidArguments) {
  {
    ScopedEnvironment env({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
    EXPECT_EQ(error_of<InvalidArgumentError>([] { EnvironmentClusterResolver resolver; }),
              "EnvironmentClusterResolver: RANK=one is no number; it is this worker's rank");
  }
  {
    ScopedEnvironment env({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    EXPECT_EQ(error_of<InvalidArgumentError>([] { EnvironmentClusterResolver resolver; }),
              "EnvironmentClusterResolver: RANK=2 is no worker of WORLD_SIZE=2 (ranks 0 to 1)");
  }
  ScopedEnvironment env({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  EXPECT_EQ(error_of<InvalidArgumentError>([] { EnvironmentClusterResolver resolver; }),
            "EnvironmentClusterResolver: WORLD_SIZE=0; a job has at least one worker");
}

}  // namespace
}  // namespace distribute
