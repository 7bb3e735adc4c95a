// distribute::Timeline on a multi-worker job: ctest launches this binary under `mpirun -np 2`, two
// workers of two replicas each. Timeline::stop() on every worker writes one file, worker 0's:
// valid JSON (Python's json loads it) following the trace-event schema, begins and ends paired on
// every track, one process per worker named after it and its host, every collective on each of the
// four replicas' tracks with the same sequence number, and on each worker's cross-worker track the
// vote and the data phase across the workers; the clock alignment is stated; a failing run still
// writes a balanced file with the replica's error, also when its message is not UTF-8. With
// --worker_1_stays_away (a second ctest entry, a strategy timeout of 2 s) worker 1 records nothing
// and never calls stop(): worker 0's stop() gives up on it after the timeout and writes its own
// events, naming worker 1 as missing.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/timeline.h"
#include "distribute/distribute.h"
#include "nlohmann/json.hpp"
#include "testing/temp_files.h"
#include "testing/trace.h"

namespace distribute {
namespace {

using nlohmann::json;
using testing::check_schema;
using testing::collectives_of;
using testing::count;
using Collectives = std::vector<std::pair<std::string, std::int64_t>>;

constexpr int kLocalReplicas = 2;
// Set by --worker_1_stays_away.
bool g_worker_1_stays_away = false;
constexpr int kCross = detail::timeline::kCrossWorkerTrack;

MultiWorkerMirroredStrategy& strategy() {
  static MultiWorkerMirroredStrategy* s = [] {
    MultiWorkerMirroredStrategyOptions options;
    options.local_devices = {"CPU:0", "CPU:1"};
    options.communication.timeout = std::chrono::seconds(g_worker_1_stays_away ? 2 : 30);
    return new MultiWorkerMirroredStrategy(options);
  }();
  return *s;
}

int rank() { return strategy().extended().worker_id(); }

// One path for every worker: worker 0's process id names it.
std::string job_path(const std::string& name) {
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return testing::temp_path(name, ".json", pid);
}

// Every worker's host name, in worker order.
std::vector<std::string> hosts() {
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(mine, &length);
  std::vector<char> all(2 * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
  return {std::string(all.data()), std::string(all.data() + MPI_MAX_PROCESSOR_NAME)};
}

TEST(TimelineMultiWorker, OneFileForTheJobWithEveryCollectiveOnEveryReplicasTrack) {
  const std::string path = job_path("timeline_2x2");
  const std::vector<std::string> host = hosts();
  Timeline::start(path);
  strategy().run([] {
    ReplicaContext* ctx = get_replica_context();
    Tensor grad = Tensor::zeros(DType::kFloat32, Shape{1 << 16});
    ctx->all_reduce(ReduceOp::kSum, grad);
    ctx->all_reduce(ReduceOp::kMean, grad);
    ctx->merge_call([](Strategy&) {});
  });
  EXPECT_TRUE(Timeline::stop());
  if (rank() != 0) return;

  EXPECT_TRUE(testing::python_loads(path));
  const json trace = testing::read_trace(path);
  const std::vector<json> events = check_schema(trace);
  const json& other = trace.at("otherData");
  EXPECT_EQ(other.at("workers"), 2);
  EXPECT_EQ(other.at("dropped_events"), 0);
  EXPECT_FALSE(other.contains("missing_workers"));
  EXPECT_EQ(other.at("clock_error_us").at("0"), 0.0);
  EXPECT_GT(other.at("clock_error_us").at("1").get<double>(), 0.0);
  EXPECT_TRUE(other.at("clock_offset_us").contains("1"));

  const std::map<std::pair<int, int>, std::string> names = testing::track_names(trace);
  const Collectives expected = {{"all_reduce", 1}, {"all_reduce", 2}, {"merge_call", 3}};
  for (int worker : {0, 1}) {
    SCOPED_TRACE(worker);
    EXPECT_EQ(names.at({worker, -1}), "worker " + std::to_string(worker) + " on " + host[static_cast<std::size_t>(worker)]);
    EXPECT_EQ(names.at({worker, kCross}), "cross-worker");
    for (int local = 0; local < kLocalReplicas; ++local) {
      const int replica = worker * kLocalReplicas + local;
      SCOPED_TRACE(replica);
      EXPECT_EQ(names.at({worker, replica}), "replica " + std::to_string(replica));
      EXPECT_EQ(collectives_of(events, worker, replica), expected);
      EXPECT_EQ(count(events, worker, replica, "run", "B"), 1);
    }
    // Then the step in which the workers learn that every replica returned.
    Collectives across = collectives_of(events, worker, kCross);
    ASSERT_GE(across.size(), expected.size());
    across.resize(expected.size());
    EXPECT_EQ(across, expected);
    EXPECT_GE(count(events, worker, kCross, "vote", "B"), 3);
    EXPECT_EQ(count(events, worker, kCross, "local", "B"), 2);
    EXPECT_EQ(count(events, worker, kCross, "data", "B"), 2);
    // Each carries the bytes sent: 2^16 float32 values.
    for (const json& e : events) {
      if (e.at("pid") == worker && e.at("tid") == kCross && e.at("name") == "data" && e.at("ph") == "B") {
        EXPECT_EQ(e.at("args").at("bytes"), 4 << 16);
      }
    }
  }
  std::filesystem::remove(path);
}

TEST(TimelineMultiWorker, AFailingRunStillWritesABalancedFileWithTheError) {
  const std::string path = job_path("timeline_2x2_failing");
  Timeline::start(path);
  EXPECT_ANY_THROW(strategy().run([] {
    ReplicaContext* ctx = get_replica_context();
    ctx->all_reduce(ReduceOp::kSum, 1.0f);
    if (ctx->replica_id_in_sync_group() == 3) throw InvalidArgumentError("replica 3 gave up");
    ctx->all_reduce(ReduceOp::kSum, 1.0f);
  }));
  EXPECT_TRUE(Timeline::stop());
  if (rank() != 0) return;

  const std::vector<json> events = check_schema(testing::read_trace(path));
  std::vector<std::string> errors_of_3;
  for (const json& e : events) {
    if (e.at("ph") == "i" && e.at("pid") == 1 && e.at("tid") == 3) errors_of_3.push_back(e.at("args").at("message"));
  }
  EXPECT_EQ(errors_of_3, std::vector<std::string>{"replica 3 gave up"});
  for (int replica = 0; replica < 4; ++replica) EXPECT_EQ(count(events, replica / 2, replica, "run", "E"), 1);
  std::filesystem::remove(path);
}

// Worker 1's part of the file crosses to worker 0 as text: a message that is not UTF-8 must not
// stop worker 1 from sending it (it once threw nlohmann::json::type_error there, and worker 0
// waited for its part until the timeout).
TEST(TimelineMultiWorker, AnErrorMessageThatIsNotUtf8ReachesWorker0WithTheInvalidBytesReplaced) {
  const std::string path = job_path("timeline_2x2_not_utf8");
  Timeline::start(path);
  EXPECT_ANY_THROW(strategy().run([] {
    ReplicaContext* ctx = get_replica_context();
    if (ctx->replica_id_in_sync_group() == 3) throw std::runtime_error("bad \xff byte");
    ctx->all_reduce(ReduceOp::kSum, 1.0f);
  }));
  bool stopped = false;
  EXPECT_NO_THROW(stopped = Timeline::stop());
  EXPECT_TRUE(stopped);
  if (rank() != 0) return;

  EXPECT_TRUE(testing::python_loads(path));
  const json trace = testing::read_trace(path);
  const std::vector<json> events = check_schema(trace);
  EXPECT_FALSE(trace.at("otherData").contains("missing_workers"));
  std::vector<std::string> errors_of_3;
  for (const json& e : events) {
    if (e.at("ph") == "i" && e.at("pid") == 1 && e.at("tid") == 3) errors_of_3.push_back(e.at("args").at("message"));
  }
  EXPECT_EQ(errors_of_3, std::vector<std::string>{"bad \uFFFD byte"});
  for (int replica = 0; replica < 4; ++replica) EXPECT_EQ(count(events, replica / 2, replica, "run", "E"), 1);
  std::filesystem::remove(path);
}

TEST(TimelineMultiWorkerGone, AWorkerThatNeverStopsIsLeftOutAfterTheTimeout) {
  if (!g_worker_1_stays_away) GTEST_SKIP() << "runs with --worker_1_stays_away";
  const std::string path = job_path("timeline_2x2_gone");
  if (rank() == 0) Timeline::start(path);
  strategy().run([] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  if (rank() != 0) return;  // and never stops a timeline
  // Bounded by the strategy's timeout; ctest's (below the timeline's 60 s default) catches a hang.
  EXPECT_TRUE(Timeline::stop());

  const json trace = testing::read_trace(path);
  const std::vector<json> events = check_schema(trace);
  EXPECT_EQ(trace.at("otherData").at("missing_workers"), json::array({1}));
  for (const json& e : events) EXPECT_EQ(e.at("pid"), 0) << e;
  EXPECT_EQ(collectives_of(events, 0, 0), (Collectives{{"all_reduce", 1}}));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace distribute

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--worker_1_stays_away") distribute::g_worker_1_stays_away = true;
  }
  distribute::strategy();  // initialises MPI
  return RUN_ALL_TESTS();
}
