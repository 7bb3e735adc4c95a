// A job that must die: run under mpirun by tests/expect_job_dies.cmake, which checks that mpirun
// exits non-zero within seconds rather than hanging.
//   exit:   worker 1 exits with status 3 in the middle of a step (as a crashed worker does,
//           without MPI_Finalize) while worker 0 waits in an all_reduce with no timeout;
//   signal: the same, worker 1 killed by SIGKILL;
//   stall:  worker 1 freezes (SIGSTOP) after every worker agreed on a 128 MiB all_reduce, in the
//           middle of its data phase: once the timeout passes, the other workers report the
//           stalled data phase, naming worker 1 as the one that does not answer, and end the
//           job, since a collective left half done cannot be taken back. Any number of workers.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "distribute/distribute.h"

int main(int argc, char** argv) {
  using namespace distribute;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "exit" && mode != "signal" && mode != "stall") {
    std::cerr << "usage: multi_worker_fault exit|signal|stall\n";
    return 2;
  }
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = {"CPU:0", "CPU:1"};
  MultiWorkerMirroredStrategy strategy(options);
  // One step that works, so that the job is known to be up.
  strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  if (mode == "stall") {
    // Agreeing on a call takes a few header messages; the data phase reduces 2 x 128 MiB on each
    // worker and then crosses them, which takes far longer than the 50 ms after which worker 1
    // freezes. A first all_reduce of that size brings every buffer in (its first touch of fresh
    // pages is slower than agreeing), and the one-value run after it lines the workers up.
    // The warm-up may take long under a sanitizer on a busy machine; only the frozen call times out.
    const Tensor big = Tensor::zeros(DType::kFloat32, Shape{32 << 20});
    const auto all_reduce_big = [&big](std::chrono::seconds timeout) {
      return [&big, timeout] { get_replica_context()->all_reduce(ReduceOp::kSum, big, {.timeout = timeout}); };
    };
    strategy.run(all_reduce_big(std::chrono::seconds(120)));
    strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    std::thread freeze;
    if (strategy.extended().worker_id() == 1) {
      std::cout << "worker 1 freezes in the data phase" << std::endl;
      freeze = std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        std::raise(SIGSTOP);
      });
    }
    strategy.run(all_reduce_big(std::chrono::seconds(3)));
    std::cout << "worker 0 was not stopped" << std::endl;
    if (freeze.joinable()) freeze.join();
    return 0;
  }
  if (strategy.extended().worker_id() == 1) {
    std::cout << "worker 1 leaves" << std::endl;
    if (mode == "exit") std::_Exit(3);
    std::raise(SIGKILL);
  }
  strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  std::cout << "worker 0 was not stopped" << std::endl;
  return 0;
}
