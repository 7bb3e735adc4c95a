// The job of the multi-host fault tests (fault.sh): workers on hosts made by the harness, one of
// whose links the test breaks, or whose processes it kills, while the job runs. Every worker
// prints what it is doing as "worker W on HOST: ...", so the test can wait for the moment to
// strike and tell the workers' ends apart.
//   multihost_fault MODE [--local_replicas=L] [--timeout=SECONDS] [--run_for=SECONDS]
//   stream:  64 MiB all_reduces, one after another, for --run_for seconds (default 60), then exits
//            0 (the test struck too late, or nothing happened); worker 0 prints "streaming" once
//            the first has crossed the hosts. The test sets a link down, or kills a host, then.
//   pause:   one all_reduce, "paused between steps" from every worker, 2 s of rest, then another
//            all_reduce: the test sets a link down during the rest, so the next collective's
//            agreement meets it.
//   ok:      a few all_reduces, small and of 64 MiB, each checked; "worker W on HOST: ok".
// Every collective waits at most --timeout seconds (default 5) for another worker. An error escapes
// main, as in a program that does not catch it: std::terminate prints it and aborts the worker,
// and mpirun ends the job. (Returning from main instead would finalize MPI at exit, which waits
// for the unreachable workers.)
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "distribute/distribute.h"

namespace {

using namespace distribute;

constexpr std::int64_t kBigFloats = std::int64_t{16} << 20;  // 64 MiB of float32

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// All-reduces `value` (every replica passes it) as SUM and returns the first local result.
Tensor sum_of(MultiWorkerMirroredStrategy& strategy, const Tensor& value) {
  const auto results = strategy.run([&value] { return get_replica_context()->all_reduce(ReduceOp::kSum, value); });
  return strategy.experimental_local_results(results)[0];
}

int run(const std::string& mode, int local_replicas, double timeout, double run_for) {
  MultiWorkerMirroredStrategyOptions options;
  for (int l = 0; l < local_replicas; ++l) options.local_devices.push_back("CPU:" + std::to_string(l));
  options.communication.timeout = std::chrono::duration<double>(timeout);
  MultiWorkerMirroredStrategy strategy(options);
  const int worker = strategy.extended().worker_id();
  const std::string me = "worker " + std::to_string(worker) + " on " + host_name();
  const auto say = [&me](const std::string& what) {
    std::printf("%s: %s\n", me.c_str(), what.c_str());
    std::fflush(stdout);
  };
  const float replicas = static_cast<float>(strategy.num_replicas_in_sync());
  const Tensor one = Tensor::scalar(1.0f);
  if (sum_of(strategy, one).flat<float>()(0) != replicas) throw std::runtime_error("a wrong sum of ones");
  const Tensor big = Tensor::zeros(DType::kFloat32, Shape{kBigFloats});

  if (mode == "stream") {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(run_for);
    sum_of(strategy, big);
    if (worker == 0) say("streaming");
    while (std::chrono::steady_clock::now() < end) sum_of(strategy, big);
    say("was not stopped");
    return 0;
  }
  if (mode == "pause") {
    say("paused between steps");
    std::this_thread::sleep_for(std::chrono::seconds(2));
    sum_of(strategy, one);
    say("was not stopped");
    return 0;
  }
  Tensor ones = Tensor::zeros(DType::kFloat32, Shape{kBigFloats});
  ones.flat<float>().setConstant(1.0f);
  const Tensor sum = sum_of(strategy, ones);
  if ((sum.flat<float>() != replicas).any()) throw std::runtime_error("a wrong 64 MiB sum");
  say("ok");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  int local_replicas = 1;
  double timeout = 5;
  double run_for = 60;
  bool usage = mode != "stream" && mode != "pause" && mode != "ok";
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--local_replicas=", 0) == 0) {
      local_replicas = std::stoi(arg.substr(17));
    } else if (arg.rfind("--timeout=", 0) == 0) {
      timeout = std::stod(arg.substr(10));
    } else if (arg.rfind("--run_for=", 0) == 0) {
      run_for = std::stod(arg.substr(10));
    } else {
      usage = true;
    }
  }
  if (usage) {
    std::fprintf(stderr, "usage: multihost_fault stream|pause|ok [--local_replicas=L] [--timeout=S] [--run_for=S]\n");
    return 2;
  }
  return run(mode, local_replicas, timeout, run_for);
}
