// Jobs with a faulty worker, run under mpirun. The first three must die: tests/expect_job_dies.cmake
// checks that mpirun exits non-zero within seconds rather than hanging.
//   exit:   worker 1 exits with status 3 in the middle of a step (as a crashed worker does,
//           without MPI_Finalize) while worker 0 waits in an all_reduce with no timeout;
//   signal: the same, worker 1 killed by SIGKILL;
//   stall:  worker 1 freezes (SIGSTOP) after every worker agreed on a 128 MiB all_reduce, in the
//           middle of its data phase: once the timeout passes, the other workers report the
//           stalled data phase, naming worker 1 as the one that does not answer, and end the
//           job, since a collective left half done cannot be taken back. Any number of workers.
//   unreachable_at_exit: worker 1 freezes (SIGSTOP) between steps; worker 0's next all_reduce
//           times out, it catches the error and returns from main. MPI_Finalize at exit would
//           wait for worker 1 for ever: the library bounds it, and worker 0 exits, which ends
//           the job.
// The last must live, and exits 0 only when every process saw what it expects:
//   stall_fail_strategy: three processes, of which ranks 0 and 1 are the workers of a strategy on
//           a sub-communicator with StalledCollectiveAction::kFailStrategy, and rank 2 stands for
//           the program's other MPI work. Worker 1 freezes as in `stall`; worker 0 gets
//           DeadlineExceededError naming worker 1, then UnavailableError, destroys its strategy,
//           and exchanges a message with rank 2 while worker 1 is still stopped; then it wakes
//           worker 1, which fails its strategy alike, and the three meet in a barrier. Then the two
//           workers build a new strategy on the same sub-communicator, which works, and every
//           process finalises MPI.
#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "distribute/distribute.h"
#include "distribute/mpi/mpi_cluster_resolver.h"

namespace distribute {
namespace {

// An all_reduce of 128 MiB per replica, with `timeout`: its data phase between the workers takes
// far longer than the 50 ms after which a frozen worker stops.
std::function<void()> all_reduce_big(const Tensor& big, std::chrono::seconds timeout) {
  return [&big, timeout] { get_replica_context()->all_reduce(ReduceOp::kSum, big, {.timeout = timeout}); };
}

// Runs the warm-up of `stall` (below) on `strategy`, then the all_reduce in whose data phase
// worker 1 freezes (SIGSTOP), with a timeout of 3 s; returns what that run threw, else nothing.
// Only worker 1 returns after it has been woken.
std::exception_ptr freeze_worker_1_in_a_data_phase(MultiWorkerMirroredStrategy& strategy) {
  // Agreeing on a call takes a few header messages; the data phase reduces 2 x 128 MiB on each
  // worker and then crosses them, which takes far longer than the 50 ms after which worker 1
  // freezes. A first all_reduce of that size brings every buffer in (its first touch of fresh
  // pages is slower than agreeing), and the one-value run after it lines the workers up.
  // The warm-up may take long under a sanitizer on a busy machine; only the frozen call times out.
  const Tensor big = Tensor::zeros(DType::kFloat32, Shape{32 << 20});
  strategy.run(all_reduce_big(big, std::chrono::seconds(120)));
  strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  std::thread freeze;
  if (strategy.extended().worker_id() == 1) {
    std::cout << "worker 1 freezes in the data phase" << std::endl;
    freeze = std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::raise(SIGSTOP);
    });
  }
  std::exception_ptr error;
  try {
    strategy.run(all_reduce_big(big, std::chrono::seconds(3)));
  } catch (...) {
    error = std::current_exception();
  }
  if (freeze.joinable()) freeze.join();
  return error;
}

// The state letter of process `pid` in /proc (T: stopped).
char process_state(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const std::size_t name_end = line.rfind(')');
  return name_end != std::string::npos && name_end + 2 < line.size() ? line[name_end + 2] : '?';
}

// The message of `error` if it is an E, else a description of what it is.
template <class E>
bool is_error(const std::exception_ptr& error, std::string& message) {
  if (error == nullptr) {
    message = "no error";
    return false;
  }
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    message = e.what();
    return true;
  } catch (const std::exception& e) {
    message = std::string("another error: ") + e.what();
  } catch (...) {
    message = "a non-standard exception";
  }
  return false;
}

int stall_fail_strategy() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 3) {
    std::cerr << "stall_fail_strategy needs 3 processes, not " << size << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  std::array<int, 3> pids{};
  const int pid = static_cast<int>(::getpid());
  MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  // Any failed expectation ends the job at once, waking worker 1 so that nothing stays stopped.
  const auto fail = [&](const std::string& why) {
    std::cerr << "stall_fail_strategy: rank " << rank << ": " << why << std::endl;
    ::kill(pids[1], SIGCONT);
    MPI_Abort(MPI_COMM_WORLD, 1);
  };
  constexpr int kPingTag = 5;
  MPI_Comm trainers = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &trainers);
  if (rank == 2) {
    int ping = 0;
    MPI_Recv(&ping, 1, MPI_INT, 0, kPingTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    ping += 1;
    MPI_Send(&ping, 1, MPI_INT, 0, kPingTag, MPI_COMM_WORLD);
  } else {
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = {"CPU:0", "CPU:1"};
    options.cluster_resolver = mpi_cluster_resolver(trainers);
    options.on_stalled_collective = StalledCollectiveAction::kFailStrategy;
    auto strategy = std::make_unique<MultiWorkerMirroredStrategy>(options);
    const auto start = std::chrono::steady_clock::now();
    const std::exception_ptr stalled = freeze_worker_1_in_a_data_phase(*strategy);
    std::string message;
    if (!is_error<DeadlineExceededError>(stalled, message)) fail("the stalled all_reduce gave " + message);
    if (rank == 0) {
      const std::string expected =
          "worker 0: the data phase of all_reduce #1 stalled past its timeout (every worker had agreed to the "
          "collective); worker 1 did not answer within 1 s (stopped, hung, or busy outside the strategy); the "
          "strategy is unusable and the job goes on (StalledCollectiveAction::kFailStrategy)";
      if (message != expected) fail("the stalled all_reduce says \"" + message + "\"");
      if (process_state(pids[1]) != 'T') fail("worker 1 is not stopped when worker 0 gives up");
    }
    std::cout << "worker " << rank << ": DeadlineExceededError: " << message << std::endl;
    std::exception_ptr next;
    try {
      strategy->run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    } catch (...) {
      next = std::current_exception();
    }
    if (!is_error<UnavailableError>(next, message) ||
        message.find("unusable after an earlier failure") == std::string::npos) {
      fail("the collective after the stall gave " + message);
    }
    strategy.reset();
    if (rank == 0) {
      // The program's own MPI goes on while the strategy's peer is still stopped.
      int ping = 0;
      MPI_Send(&ping, 1, MPI_INT, 2, kPingTag, MPI_COMM_WORLD);
      MPI_Recv(&ping, 1, MPI_INT, 2, kPingTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (ping != 1) fail("rank 2 answered " + std::to_string(ping));
      if (process_state(pids[1]) != 'T') fail("worker 1 woke before worker 0 used MPI outside the strategy");
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(100)) fail("worker 0 took over 100 s");
      std::cout << "worker 0 used MPI outside the strategy with worker 1 stopped; waking it" << std::endl;
      ::kill(pids[1], SIGCONT);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (trainers != MPI_COMM_NULL) {
    // The sub-communicator serves a new strategy, on communicators of its own.
    MultiWorkerMirroredStrategyOptions options;
    options.cluster_resolver = mpi_cluster_resolver(trainers);
    options.communication.timeout = std::chrono::seconds(60);
    MultiWorkerMirroredStrategy strategy(options);
    const PerReplica<float> sum = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
    if (sum[0] != 2.0f) fail("a new strategy's all_reduce gave " + std::to_string(sum[0]));
    std::cout << "worker " << rank << ": a new strategy on the same workers works" << std::endl;
    MPI_Comm_free(&trainers);
  }
  MPI_Finalize();
  std::cout << "rank " << rank << " finalised" << std::endl;
  return 0;
}

}  // namespace
}  // namespace distribute

int main(int argc, char** argv) {
  using namespace distribute;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "stall_fail_strategy") return distribute::stall_fail_strategy();
  if (mode != "exit" && mode != "signal" && mode != "stall" && mode != "unreachable_at_exit") {
    std::cerr << "usage: multi_worker_fault exit|signal|stall|unreachable_at_exit|stall_fail_strategy\n";
    return 2;
  }
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = {"CPU:0", "CPU:1"};
  MultiWorkerMirroredStrategy strategy(options);
  // One step that works, so that the job is known to be up.
  strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  if (mode == "stall") {
    if (const std::exception_ptr error = freeze_worker_1_in_a_data_phase(strategy)) std::rethrow_exception(error);
    std::cout << "worker 0 was not stopped" << std::endl;
    return 0;
  }
  if (mode == "unreachable_at_exit") {
    if (strategy.extended().worker_id() == 1) {
      std::cout << "worker 1 freezes" << std::endl;
      std::raise(SIGSTOP);
    }
    try {
      strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, {.timeout = std::chrono::seconds(1)}); });
    } catch (const DeadlineExceededError& e) {
      std::cout << "worker 0 caught: " << e.what() << std::endl;
    }
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
