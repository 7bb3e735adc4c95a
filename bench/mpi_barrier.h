// What the MPI benchmarks share: a barrier that lets waiting ranks sleep.
#pragma once

#include <mpi.h>

#include <chrono>
#include <thread>

namespace distribute::bench {

// A barrier that sleeps instead of polling at full speed (Open MPI's blocking calls spin), so the
// waiting ranks leave the cores to rank 0 while it measures memcpy.
inline void sleeping_barrier() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  int done = 0;
  while (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace distribute::bench
