// How a cluster resolver's task maps onto the workers of the collective group.
#include "multi_worker/cluster_resolver.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/check.h"
#include "distribute/errors.h"
#include "distribute/strategy/multi_worker_mirrored_strategy.h"

namespace distribute {

namespace detail {
namespace {

constexpr const char* kPrefix = "MultiWorkerMirroredStrategy: ";

// ("worker", 1), as messages name a task.
std::string task_text(std::string_view task_type, int task_id) {
  return absl::StrCat("(\"", std::string(task_type), "\", ", task_id, ")");
}

// Why a task of `task_type`, which is no chief or worker, has no place among the workers.
std::string why_no_worker(std::string_view task_type) {
  if (task_type == "evaluator") {
    return "an evaluator runs outside the collective group, as in TF: give it a strategy of its own "
           "(MirroredStrategy or OneDeviceStrategy) instead of a MultiWorkerMirroredStrategy";
  }
  if (task_type == "ps") {
    return "a parameter server has no place in it (every worker keeps its own copy of the variables): construct "
           "the strategy in the chief and worker tasks only";
  }
  return "the task types are \"chief\" (worker 0) and \"worker\" (the others), beside \"evaluator\" and \"ps\" "
         "tasks, which are no workers";
}

}  // namespace

int worker_id_in_cluster(const ClusterSpec& spec, std::string_view task_type, int task_id) {
  DISTRIBUTE_CHECK(!spec.jobs().empty(), InvalidArgumentError, kPrefix,
                   "the cluster resolver's spec lists no jobs (a TFConfigClusterResolver reads them from TF_CONFIG's "
                   "\"cluster\": is TF_CONFIG set in this process?); describe every chief and worker task");
  DISTRIBUTE_CHECK(!task_type.empty(), InvalidArgumentError, kPrefix,
                   "the cluster resolver names no task for this process (a TFConfigClusterResolver reads it from "
                   "TF_CONFIG's \"task\"); set it, {\"type\": \"worker\", \"index\": i}, or the resolver's "
                   "task_type and task_id");
  for (const std::string& job : spec.jobs()) {
    DISTRIBUTE_CHECK(job == "chief" || job == "worker" || job == "evaluator" || job == "ps", InvalidArgumentError,
                     kPrefix, "the cluster spec has a job \"", job, "\", which is no task type of a cluster (TF "
                     "knows \"chief\", \"worker\", \"evaluator\" and \"ps\"); list the workers under \"chief\" "
                     "(at most one, worker 0) and \"worker\"");
  }
  const int chiefs = spec.num_tasks("chief");
  DISTRIBUTE_CHECK(chiefs <= 1, InvalidArgumentError, kPrefix, "the cluster spec lists ", chiefs,
                   " \"chief\" tasks; a cluster has at most one chief (worker 0 of the collective group): list the "
                   "others under \"worker\"");
  DISTRIBUTE_CHECK(task_type == "chief" || task_type == "worker", InvalidArgumentError, kPrefix,
                   "the cluster resolver says this process is task ", task_text(task_type, task_id),
                   ", but only \"chief\" and \"worker\" tasks are workers of the collective group; ",
                   why_no_worker(task_type));
  const int tasks = spec.num_tasks(task_type);
  DISTRIBUTE_CHECK(task_id >= 0 && task_id < tasks, InvalidArgumentError, kPrefix,
                   "the cluster resolver says this process is task ", task_text(task_type, task_id),
                   " but the cluster spec lists ",
                   tasks == 0 ? absl::StrCat("no \"", std::string(task_type), "\" task")
                              : absl::StrCat(tasks, " \"", std::string(task_type), "\" task", tasks == 1 ? "" : "s",
                                             " (task ids 0 to ", tasks - 1, ")"),
                   "; a resolver's task_id() is an index into its job's tasks");
  return task_type == "chief" ? 0 : chiefs + task_id;
}

void check_cluster_resolver(const ClusterResolver& resolver, int rank, int workers) {
  const ClusterSpec spec = resolver.cluster_spec();
  const std::string task_type = resolver.task_type();
  const int task_id = resolver.task_id();
  const int worker = worker_id_in_cluster(spec, task_type, task_id);
  const int tasks = spec.num_tasks("chief") + spec.num_tasks("worker");
  DISTRIBUTE_CHECK(tasks == workers, InvalidArgumentError, kPrefix, "the cluster resolver lists ", tasks,
                   " tasks but MPI launched ", workers, " processes; launch one process per task");
  DISTRIBUTE_CHECK(worker == rank, InvalidArgumentError, kPrefix, "the cluster resolver says this process is task ",
                   task_text(task_type, task_id), ", which is worker ", worker, " of the collective group (the chief "
                   "is worker 0, then the \"worker\" tasks in task id order), but it is worker ", rank, " (its rank "
                   "among the ", workers, " MPI processes that are the workers); give each process the task whose "
                   "worker is its rank");
}

}  // namespace detail

}  // namespace distribute
