// MultiWorkerMirroredStrategy: MirroredStrategy across processes (tf.distribute.
// MultiWorkerMirroredStrategy). The same program runs as every worker of a job launched by mpirun
// or srun; each worker has its local replicas (threads, as in MirroredStrategy) and
// num_replicas_in_sync() counts every worker's. Replica ids are global: worker w's local replica l
// is w * num_local_replicas() + l. run() takes and returns this worker's values (PerReplica and
// experimental_local_results are local); collectives, merge_call and the cross-replica operations
// are collective across the workers.
//
// Everything here is implemented in the separate library distribute::mpi
// (find_package(distribute CONFIG REQUIRED COMPONENTS mpi)); this header does not include <mpi.h>.
#pragma once

#include "distribute/config.h"
#if !DISTRIBUTE_HAS_MPI
#error "this build of distribute has no MPI component: install Open MPI (Debian: libopenmpi-dev openmpi-bin), configure distribute with -DDISTRIBUTE_WITH_MPI=ON, reinstall it, and link distribute::mpi"
#endif

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "distribute/cluster/cluster_resolver.h"
#include "distribute/collective/communication_options.h"
#include "distribute/strategy/strategy.h"

namespace distribute {

// The workers talk over MPI whatever the resolver (distribute/cluster/cluster_resolver.h): a
// resolver describes the job (its tasks and their addresses, and which task this process is), and
// says which MPI processes are the workers. The strategy's constructor checks it
// (InvalidArgumentError for other jobs, two chiefs, a task type that is no chief or worker, a task
// id outside its job, a number of chief and worker tasks other than of MPI processes, or a task
// whose worker is not the process's rank among them).
//
// MpiClusterResolver is the job MPI launched: MPI_COMM_WORLD's rank r is task ("worker", r); the addresses are the
// ranks' host names. Initialises MPI if the program has not (see MultiWorkerMirroredStrategy).
class MpiClusterResolver : public ClusterResolver {
 public:
  MpiClusterResolver();
  // The workers are the ranks of another communicator (a subset of the job's processes, or a
  // program's own layout), given as MpiCommunicator{comm}, or through mpi_cluster_resolver(comm),
  // from <distribute/mpi/mpi_cluster_resolver.h>, which includes <mpi.h>. InvalidArgumentError for
  // MPI_COMM_NULL (a process that is not one of its ranks) or an intercommunicator.
  explicit MpiClusterResolver(const MpiCommunicator& comm);
  ClusterSpec cluster_spec() const override { return spec_; }
  std::string task_type() const override { return "worker"; }
  int task_id() const override { return task_id_; }
  // The communicator given at construction; null for MPI_COMM_WORLD.
  const MpiCommunicator* mpi_communicator() const override { return comm_.get(); }

 private:
  ClusterSpec spec_;
  int task_id_ = 0;
  std::shared_ptr<const MpiCommunicator> comm_;
};

// What a worker does when the data phase of a collective across the workers stalls past its
// timeout after every worker agreed to it: a peer stopped answering mid-transfer (stopped, hung,
// or busy outside the strategy). Either way the worker first asks the others whether they are
// alive and names those that do not answer (docs/multi_worker.md, "The errors").
enum class StalledCollectiveAction {
  // Reports the stall on stderr and ends the whole job (MPI_Abort): for a job that is nothing but
  // the training loop, which cannot go on without the silent worker.
  kEndJob,
  // Throws DeadlineExceededError from the stalled call, with the same report, and leaves the
  // strategy unusable (UnavailableError from every later collective) while the process and its
  // MPI go on: for a program that gave the strategy a sub-communicator (mpi_cluster_resolver) and
  // keeps other MPI work. The stalled transfers cannot be cancelled; they go on into buffers of
  // the strategy's own, kept until they complete or the process exits, never into the caller's
  // tensors. This costs a copy into those buffers and one out of them in every data phase.
  kFailStrategy,
};

struct MultiWorkerMirroredStrategyOptions {
  // This worker's replicas; empty: every GPU, else {"CPU:0"}. Every worker must have as many.
  std::vector<std::string> local_devices;
  // The defaults of every collective: a timeout here bounds every wait for another worker too.
  CommunicationOptions communication;
  // Null: an MpiClusterResolver.
  std::shared_ptr<const ClusterResolver> cluster_resolver;
  // Each worker acts on its own setting, so give every worker the same; a value that is neither
  // is an InvalidArgumentError from the constructor. It governs the data that crosses the workers
  // through MPI; with GPU replicas, an NCCL data phase past the timeout always fails the strategy
  // without ending the job (docs/multi_worker.md, "GPUs").
  StalledCollectiveAction on_stalled_collective = StalledCollectiveAction::kEndJob;
};

class MultiWorkerMirroredStrategy final : public Strategy {
 public:
  // Collective across the workers: every worker constructs its strategy, and they agree on the
  // number of local replicas (InvalidArgumentError when they differ). Initialises MPI when the
  // program has not (asking for MPI_THREAD_MULTIPLE; UnavailableError below
  // MPI_THREAD_SERIALIZED) and then finalises it at exit; a program that initialised MPI keeps it.
  MultiWorkerMirroredStrategy();
  explicit MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions options);
  ~MultiWorkerMirroredStrategy() override;
  std::string name() const override;
  const ClusterResolver& cluster_resolver() const;

 private:
  std::shared_ptr<const ClusterResolver> resolver_;
};

}  // namespace distribute
