// The MPI backend of MultiWorkerMirroredStrategy (multi_worker/backends.h): MpiClusterResolver, and
// the workers joined over a communicator whose ranks they are.
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <utility>

#include "base/mutex.h"
#include "base/timeline.h"
#include "cluster/mpi/mpi_worker_transport.h"
#include "cluster/mpi/runtime.h"
#include "distribute/check.h"
#include "distribute/errors.h"
#include "distribute/mpi/mpi_cluster_resolver.h"
#include "multi_worker/backends.h"
#include "multi_worker/cluster_resolver.h"

namespace distribute {
namespace {

// Every rank's host name, gathered over `comm`.
std::vector<std::string> rank_hosts(MPI_Comm comm) {
  detail::MutexLock lock(cluster::mpi::MpiRuntime::instance().mutex());
  return cluster::mpi::processor_names(comm);
}

// A program that finalises MPI itself does so before exit, where the timeline would find the
// other workers gone and each worker would write its own events to the one path. MPI_Finalize
// first deletes MPI_COMM_SELF's attributes, with every process inside it and MPI still working:
// the timeline stops there, collectively.
int stop_timeline_on_delete(MPI_Comm, int, void*, void*) {
  detail::timeline::stop_at_exit();
  return MPI_SUCCESS;
}

void stop_timeline_at_mpi_finalize() {
  detail::MutexLock lock(cluster::mpi::MpiRuntime::instance().mutex());
  int keyval = MPI_KEYVAL_INVALID;
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, stop_timeline_on_delete, &keyval, nullptr);
  MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
}

// Whether an MPI launcher started this process: Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE, MPICH's
// and Slurm's PMI-1 PMI_SIZE, PMIx launchers PMIX_RANK.
bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

}  // namespace

MpiClusterResolver::MpiClusterResolver() {
  cluster::mpi::MpiRuntime::instance().ensure_initialized();
  MPI_Comm_rank(MPI_COMM_WORLD, &task_id_);
  spec_ = ClusterSpec({{"worker", rank_hosts(MPI_COMM_WORLD)}});
}

MpiClusterResolver::MpiClusterResolver(const MpiCommunicator& comm) {
  cluster::mpi::MpiRuntime::instance().ensure_initialized();
  DISTRIBUTE_CHECK(comm.comm != MPI_COMM_NULL, InvalidArgumentError,
                   "MpiClusterResolver: the communicator is MPI_COMM_NULL; only the processes that are its ranks "
                   "(MPI_Comm_split gave the others MPI_COMM_NULL) can be its workers");
  int inter = 0;
  MPI_Comm_test_inter(comm.comm, &inter);
  DISTRIBUTE_CHECK(!inter, InvalidArgumentError,
                   "MpiClusterResolver: the communicator is an intercommunicator; pass an intracommunicator "
                   "(MPI_Intercomm_merge makes one)");
  MPI_Comm_rank(comm.comm, &task_id_);
  spec_ = ClusterSpec({{"worker", rank_hosts(comm.comm)}});
  comm_ = std::make_shared<const MpiCommunicator>(comm);
}

namespace detail {

bool is_mpi_resolver(const ClusterResolver* resolver) {
  return dynamic_cast<const MpiClusterResolver*>(resolver) != nullptr;
}

bool mpi_is_chosen(const ClusterResolver* resolver) { return is_mpi_resolver(resolver) || launched_by_mpi(); }

std::shared_ptr<const ClusterResolver> default_mpi_resolver() { return std::make_shared<const MpiClusterResolver>(); }

WorkerConnection connect_over_mpi(const ClusterResolver& resolver, cluster::OnStall on_stall,
                                  std::exception_ptr failure) {
  const MpiCommunicator* comm = resolver.mpi_communicator();
  const MPI_Comm base = comm != nullptr ? comm->comm : MPI_COMM_WORLD;
  WorkerConnection connection;
  connection.transport = std::make_unique<cluster::mpi::MpiWorkerTransport>(base, on_stall);
  if (!failure) {
    try {
      check_cluster_resolver(resolver, connection.transport->worker_id(), connection.transport->num_workers());
    } catch (...) {
      failure = std::current_exception();
    }
  }
  connection.failure = std::move(failure);
  connection.make_timeline_transport = [base] {
    return std::make_unique<cluster::mpi::MpiWorkerTransport>(base, cluster::OnStall::kFailStrategy);
  };
  connection.timeline_reachable = [] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    return finalized == 0;
  };
  connection.after_timeline_set = stop_timeline_at_mpi_finalize;
  return connection;
}

}  // namespace detail

}  // namespace distribute
