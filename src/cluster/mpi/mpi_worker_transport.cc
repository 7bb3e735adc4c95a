// MpiWorkerTransport: the backend's parts together, and what is left of them when it goes.
#include "cluster/mpi/mpi_worker_transport.h"

namespace distribute::cluster::mpi {

MpiWorkerTransport::MpiWorkerTransport(MPI_Comm base, OnStall on_stall)
    : slot_(base), control_(slot_), stall_(slot_, control_, on_stall), data_(slot_, stall_) {}

MpiWorkerTransport::~MpiWorkerTransport() {
  NonBlockingMpiLock lock;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  control_.leave();
  stall_.leave();
  slot_.release();
}

}  // namespace distribute::cluster::mpi
