// The MPI backend's part of MultiWorkerMirroredStrategy (distribute/strategy/
// multi_worker_mirrored_strategy.h, included here): MpiClusterResolver, the job mpirun or srun
// launched. Implemented in distribute::mpi (find_package(distribute CONFIG REQUIRED COMPONENTS
// mpi)); this header does not include <mpi.h>.
#pragma once

#include "distribute/config.h"
#if !DISTRIBUTE_HAS_MPI
#error "this build of distribute has no MPI component: install Open MPI (Debian: libopenmpi-dev openmpi-bin), configure distribute with -DDISTRIBUTE_WITH_MPI=ON, reinstall it, and link distribute::mpi"
#endif

#include <memory>
#include <string>

#include "distribute/cluster/cluster_resolver.h"
#include "distribute/strategy/multi_worker_mirrored_strategy.h"

namespace distribute {

// Over MPI the workers are MPI processes whatever the resolver (distribute/cluster/
// cluster_resolver.h): a resolver describes the job (its tasks and their addresses, and which task
// this process is), and says which MPI processes are the workers. The strategy's constructor
// checks it (InvalidArgumentError for other jobs, two chiefs, a task type that is no chief or
// worker, a task id outside its job, a number of chief and worker tasks other than of MPI
// processes, or a task whose worker is not the process's rank among them).
//
// MpiClusterResolver is the job MPI launched: MPI_COMM_WORLD's rank r is task ("worker", r); the
// addresses are the ranks' host names. Initialises MPI if the program has not (see
// MultiWorkerMirroredStrategy); a strategy given one runs over MPI.
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

}  // namespace distribute
