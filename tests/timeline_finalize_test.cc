// A program that initialises and finalises MPI itself, with a timeline recording that it never
// stops: MPI_Finalize stops it (collectively, before MPI goes), so the job still gets one file,
// worker 0's, with every worker's events and the clock alignment; left to exit, each worker would
// find the others gone and write its own events to the one path. Run under `mpirun -np 2`; exits
// 0 only when worker 0 finds that file after MPI_Finalize.
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>

#include "distribute/distribute.h"
#include "nlohmann/json.hpp"
#include "testing/temp_files.h"

int main() {
  using namespace distribute;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int pid = static_cast<int>(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string path = testing::temp_path("timeline_finalize", ".json", pid);
  Timeline::start(path);
  {
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = {"CPU:0", "CPU:1"};
    options.communication.timeout = std::chrono::seconds(30);
    MultiWorkerMirroredStrategy strategy(options);
    strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  }
  MPI_Finalize();
  if (rank != 0) return 0;
  std::ifstream file(path);
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(file);
  } catch (const std::exception& e) {
    std::cerr << "the timeline " << path << " is no JSON: " << e.what() << std::endl;
    return 1;
  }
  std::filesystem::remove(path);
  std::set<int> workers;
  for (const nlohmann::json& event : trace.at("traceEvents")) workers.insert(event.at("pid").get<int>());
  const nlohmann::json& other = trace.at("otherData");
  if (workers != std::set<int>{0, 1} || other.value("workers", 0) != 2 || !other.contains("clock_offset_us")) {
    std::cerr << "the timeline holds workers' events of " << workers.size() << " worker(s), otherData "
              << other.dump() << "; expected both workers' and the job's clock alignment" << std::endl;
    return 1;
  }
  std::cout << "one timeline with both workers' events, written inside MPI_Finalize" << std::endl;
  return 0;
}
