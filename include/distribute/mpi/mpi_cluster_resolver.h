// mpi_cluster_resolver(comm): MultiWorkerMirroredStrategy on a communicator other than
// MPI_COMM_WORLD. The workers are its
// ranks, so a program can give the strategy some of its processes and keep the others for its own
// MPI work (the others must not construct a strategy on it). The strategy works on its own
// duplicate of the communicator. Unlike multi_worker_mirrored_strategy.h this header includes
// <mpi.h>:
//
//   MPI_Comm trainers;
//   MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &trainers);
//   if (trainers != MPI_COMM_NULL) {
//     MultiWorkerMirroredStrategy strategy({.local_devices = {"CPU:0", "CPU:1"},
//                                           .cluster_resolver = mpi_cluster_resolver(trainers)});
//     ...
//   }
#pragma once

// First: without the MPI component it stops the compilation, saying so, before <mpi.h> is looked for.
#include "distribute/mpi/multi_worker_mirrored_strategy.h"

#include <mpi.h>

#include <memory>

namespace distribute {

struct MpiCommunicator {
  MPI_Comm comm;
};

// InvalidArgumentError for MPI_COMM_NULL (this process is not one of its ranks) or an
// intercommunicator.
inline std::shared_ptr<const MpiClusterResolver> mpi_cluster_resolver(MPI_Comm comm) {
  return std::make_shared<const MpiClusterResolver>(MpiCommunicator{comm});
}

}  // namespace distribute
