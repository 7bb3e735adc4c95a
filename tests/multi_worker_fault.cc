// A job that must die: run under mpirun by tests/expect_job_dies.cmake, which checks that mpirun
// exits non-zero within seconds rather than hanging. Worker 1 leaves in the middle of a step
// while worker 0 waits in an all_reduce with no timeout:
//   exit:   worker 1 exits with status 3 (as a crashed worker does, without MPI_Finalize);
//   signal: worker 1 is killed by SIGKILL.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include "distribute/distribute.h"

int main(int argc, char** argv) {
  using namespace distribute;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "exit" && mode != "signal") {
    std::cerr << "usage: multi_worker_fault exit|signal\n";
    return 2;
  }
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = {"CPU:0", "CPU:1"};
  MultiWorkerMirroredStrategy strategy(options);
  // One step that works, so that the job is known to be up.
  strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  if (strategy.extended().worker_id() == 1) {
    std::cout << "worker 1 leaves" << std::endl;
    if (mode == "exit") std::_Exit(3);
    std::raise(SIGKILL);
  }
  strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  std::cout << "worker 0 was not stopped" << std::endl;
  return 0;
}
