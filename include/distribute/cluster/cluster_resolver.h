// Who is in a multi-worker job and which task this process is (tf.distribute.cluster_resolver):
// the job's description (ClusterSpec), the interface a multi-worker strategy takes
// (ClusterResolver), and the resolvers that read it from how the job was launched: the TF_CONFIG
// variable (TFConfigClusterResolver), Slurm's variables (SlurmClusterResolver) and a launcher's rank
// and world size (EnvironmentClusterResolver). A resolver only describes the job;
// MultiWorkerMirroredStrategy (<distribute/strategy/multi_worker_mirrored_strategy.h>) checks it
// and maps its tasks onto the workers.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distribute {

// The jobs of a cluster and their tasks' addresses (tf.train.ClusterSpec).
class ClusterSpec {
 public:
  explicit ClusterSpec(std::map<std::string, std::vector<std::string>> jobs = {});
  // The job names, sorted.
  std::vector<std::string> jobs() const;
  // 0 for a job that is not in the spec.
  int num_tasks(std::string_view job) const;
  // InvalidArgumentError for a job that is not in the spec.
  const std::vector<std::string>& job_tasks(std::string_view job) const;

 private:
  std::map<std::string, std::vector<std::string>, std::less<>> jobs_;
};

// An MPI communicator, defined in <distribute/mpi/mpi_cluster_resolver.h> (which includes <mpi.h>).
struct MpiCommunicator;

// Who is in the job and who this process is (tf.distribute.cluster_resolver.ClusterResolver).
//
// The workers are the "chief" and "worker" tasks, numbered as TF numbers them: the chief (at most
// one) is worker 0, then the "worker" tasks in task id order; so {"chief": [a], "worker": [b, c]}
// has the workers ("chief", 0), ("worker", 0), ("worker", 1). The spec may also list "evaluator"
// and "ps" tasks, which are no workers (they construct no MultiWorkerMirroredStrategy).
class ClusterResolver {
 public:
  virtual ~ClusterResolver();
  virtual ClusterSpec cluster_spec() const = 0;
  // This process's task: its job ("chief" or "worker") and its index in that job's tasks. An empty
  // type: the resolver knows of no task for this process.
  virtual std::string task_type() const = 0;
  virtual int task_id() const = 0;
  // The communicator whose ranks are the workers; null: MPI_COMM_WORLD's.
  virtual const MpiCommunicator* mpi_communicator() const { return nullptr; }
  // Where workers that no MPI launcher joined meet (the Gloo backend's store, GlooOptions::rendezvous):
  // "redis://HOST:PORT" or "file:///DIR"; empty where the resolver knows none.
  virtual std::string rendezvous_address() const { return {}; }
};

struct TFConfigClusterResolverOptions {
  // TF_CONFIG's text; unset: the TF_CONFIG environment variable, read at construction.
  std::optional<std::string> tf_config;
  // Replace TF_CONFIG's "task" (TF's task_type and task_id arguments).
  std::optional<std::string> task_type;
  std::optional<int> task_id;
};

// The job as TF_CONFIG describes it (tf.distribute.cluster_resolver.TFConfigClusterResolver):
//
//   TF_CONFIG='{"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
//               "task": {"type": "worker", "index": 1}}'
//
// is task ("worker", 1), worker 2 of 3. "cluster" maps each job to the list of its tasks'
// addresses; "task" names this process's; "rpc_layer" and "environment" are kept as given. Without
// TF_CONFIG (or without its "cluster" or "task") the spec is empty, or the task type is empty, as
// in TF; a strategy given such a resolver says so. InvalidArgumentError from the constructor for a
// TF_CONFIG that is no JSON object or whose parts have other types than these, naming the part.
class TFConfigClusterResolver : public ClusterResolver {
 public:
  TFConfigClusterResolver();
  explicit TFConfigClusterResolver(TFConfigClusterResolverOptions options);
  ClusterSpec cluster_spec() const override { return spec_; }
  std::string task_type() const override { return task_type_; }
  int task_id() const override { return task_id_; }
  // TF_CONFIG's "rpc_layer" and "environment"; empty where it has none.
  const std::string& rpc_layer() const { return rpc_layer_; }
  const std::string& environment() const { return environment_; }

 private:
  ClusterSpec spec_;
  std::string task_type_;
  int task_id_ = 0;
  std::string rpc_layer_;
  std::string environment_;
};

struct SlurmClusterResolverOptions {
  // The jobs and their numbers of tasks, in the order in which Slurm's tasks (SLURM_PROCID) fill
  // them (TF's `jobs`): {{"chief", 1}, {"worker", 3}} makes task 0 the chief. Empty: every task is
  // a "worker". The counts must add up to the step's number of tasks.
  std::vector<std::pair<std::string, int>> jobs;
  // The port of a node's first task; the node's next tasks take the ports after it.
  int port_base = 8888;
};

// The job Slurm launched (tf.distribute.cluster_resolver.SlurmClusterResolver), from the variables
// srun sets in each task: SLURM_PROCID (this task), SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST
// ("node[01-03],gpu7") and SLURM_STEP_TASKS_PER_NODE ("2(x3),1"), each falling back to its
// SLURM_NTASKS, SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE form. Task t's address is its node's
// host name and port_base plus its place among the node's tasks. Unlike TF's, it sets no
// CUDA_VISIBLE_DEVICES: a worker's GPUs are its local_devices. FailedPreconditionError from the
// constructor outside a Slurm step (no SLURM_PROCID); InvalidArgumentError for variables it cannot
// read, or jobs whose counts do not add up to the tasks.
class SlurmClusterResolver : public ClusterResolver {
 public:
  SlurmClusterResolver();
  explicit SlurmClusterResolver(SlurmClusterResolverOptions options);
  ClusterSpec cluster_spec() const override { return spec_; }
  std::string task_type() const override { return task_type_; }
  int task_id() const override { return task_id_; }

 private:
  ClusterSpec spec_;
  std::string task_type_;
  int task_id_ = 0;
};

struct EnvironmentClusterResolverOptions {
  // The variables to read: this worker's rank, the number of workers, and the rendezvous address.
  std::string rank_variable = "RANK";
  std::string world_size_variable = "WORLD_SIZE";
  std::string rendezvous_variable = "DISTRIBUTE_RENDEZVOUS";
};

// The job a launcher described in plain variables, as torchrun and most schedulers' launchers set
// them: RANK (this worker, 0 to WORLD_SIZE - 1), WORLD_SIZE, and DISTRIBUTE_RENDEZVOUS (the
// rendezvous store, optional). Rank r is task ("worker", r); the launcher names no addresses, so
// the spec's are empty. FailedPreconditionError from the constructor where the rank or world size
// variable is unset; InvalidArgumentError, naming the variable, for a value that is no number or a
// rank outside [0, world size).
class EnvironmentClusterResolver : public ClusterResolver {
 public:
  EnvironmentClusterResolver();
  explicit EnvironmentClusterResolver(EnvironmentClusterResolverOptions options);
  ClusterSpec cluster_spec() const override { return spec_; }
  std::string task_type() const override { return "worker"; }
  int task_id() const override { return task_id_; }
  std::string rendezvous_address() const override { return rendezvous_; }

 private:
  ClusterSpec spec_;
  int task_id_ = 0;
  std::string rendezvous_;
};

namespace detail {
// Slurm's compressed lists, expanded (exposed for their tests): host lists, "node[01-03,7],gpu"
// -> node01, node02, node03, node7, gpu; and tasks per node, "2(x3),1" -> 2, 2, 2, 1.
// InvalidArgumentError naming `variable` for text that is neither.
std::vector<std::string> expand_slurm_hostlist(std::string_view list, std::string_view variable);
std::vector<int> expand_slurm_tasks_per_node(std::string_view list, std::string_view variable);
}  // namespace detail

}  // namespace distribute
