// distribute::detail: how a cluster resolver's task maps onto the workers of
// MultiWorkerMirroredStrategy's collective group, as TF maps it (multi_worker_util's
// id_in_cluster, where the collective group's leader is the chief when there is one): the chief
// is worker 0, then the "worker" tasks in task id order. Evaluator and parameter-server tasks may
// be listed in the cluster spec but are no workers.
#pragma once

#include <string_view>

#include "distribute/strategy/multi_worker_mirrored_strategy.h"

namespace distribute::detail {

// The worker (its place in the collective group) of task (task_type, task_id) in `spec`, after
// checking the spec and the task as TF does: the spec's jobs are among "chief", "worker",
// "evaluator" and "ps", with at most one chief; the task is a chief or a worker the spec lists.
// InvalidArgumentError otherwise, saying what to change.
int worker_id_in_cluster(const ClusterSpec& spec, std::string_view task_type, int task_id);

// Over MPI: checks that `resolver` describes the collective group MPI launched: one chief or worker task
// per process, and this process (the one at `rank` among the `workers` processes) the task whose
// worker id is that rank. InvalidArgumentError otherwise, the same on every worker where their
// resolvers agree.
void check_cluster_resolver(const ClusterResolver& resolver, int rank, int workers);

}  // namespace distribute::detail
