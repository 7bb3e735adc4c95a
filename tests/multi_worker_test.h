// What the files of multi_worker_test share: where this worker's replicas are (main sets it from
// the flags), the one strategy of the whole binary, and the fixture of its tests. The tests register
// in the order the files are linked, the same on every worker.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/mpi/multi_worker_mirrored_strategy.h"

namespace distribute::testing {

extern int g_local_replicas;
// "CPU:" or "GPU:"; on GPUs, worker w's replica l is GPU:(g_first_gpu + l).
extern std::string g_device_type;
extern int g_first_gpu;
// Each worker's host name, filled by main.
extern std::vector<std::string> g_hosts;

std::string local_device(int l);
std::vector<std::string> local_devices();

// One strategy for the whole binary: constructing one is collective across the workers, and the
// error tests check that it stays usable.
MultiWorkerMirroredStrategy& strategy();

class MultiWorker : public ::testing::Test {
 protected:
  // "worker 1 (replicas 2, 3)", "workers 1, 2 (replicas 1, 2)": workers [first, last] as errors name them;
  // on several hosts with theirs: "worker 1 on host1 (replicas 2, 3)".
  std::string workers_text(int first, int last) const {
    std::vector<int> ws;
    for (int w = first; w <= last; ++w) ws.push_back(w);
    return workers_text(ws);
  }
  std::string workers_text(const std::vector<int>& workers) const {
    std::string ws;
    std::string rs;
    std::vector<std::string> hosts;
    for (int w : workers) {
      ws += (ws.empty() ? "" : ", ") + std::to_string(w);
      for (int l = 0; l < local(); ++l) rs += (rs.empty() ? "" : ", ") + std::to_string(w * local() + l);
      const std::string& host = g_hosts[static_cast<std::size_t>(w)];
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    }
    const bool one_host = std::adjacent_find(g_hosts.begin(), g_hosts.end(), std::not_equal_to<>()) == g_hosts.end();
    std::string on;
    for (const std::string& host : hosts) on += (on.empty() ? " on " : ", ") + host;
    return (workers.size() == 1 ? "worker " : "workers ") + ws + (one_host ? "" : on) +
           (local() == 1 && workers.size() == 1 ? " (replica " : " (replicas ") + rs + ")";
  }
  MultiWorkerMirroredStrategy& s = strategy();
  int workers() const { return s.extended().num_workers(); }
  int worker() const { return s.extended().worker_id(); }
  int local() const { return s.extended().num_local_replicas(); }
  int n() const { return s.num_replicas_in_sync(); }
  bool over_mpi() const { return s.backend() == CollectiveBackend::kMpi; }
  // After an error every worker's strategy still runs collectives.
  void expect_still_usable() {
    EXPECT_EQ(s.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1); })[0], n());
  }
};

}  // namespace distribute::testing
