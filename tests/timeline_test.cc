// distribute::Timeline: the file is Chrome trace-event JSON (name, ph, ts, pid, tid; begins and
// ends paired on every track), every replica's track holds the run's collectives with the same
// sequence numbers, a failing run still writes a balanced file with an error event (its message
// valid UTF-8 whatever bytes the exception held), the ring buffer's drop count is exact,
// DISTRIBUTE_TIMELINE starts one that is written at exit, and the misuses (an unwritable path,
// given to start or in DISTRIBUTE_TIMELINE, starting twice, stopping without a start, an empty
// ring, a write that fails) are errors or no-ops as documented.
#include "distribute/timeline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
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
using testing::read_trace;
using testing::temp_path;

std::vector<std::pair<std::string, std::int64_t>> collectives_of(const std::vector<json>& events, int tid) {
  return testing::collectives_of(events, 0, tid);
}

int count(const std::vector<json>& events, int tid, const std::string& name, const std::string& ph) {
  return testing::count(events, 0, tid, name, ph);
}

TEST(Timeline, TwoReplicasShowTheSameCollectivesWithTheSameSequenceNumbers) {
  const std::string path = temp_path("timeline_two_replicas", ".json");
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  Timeline::start(path);
  EXPECT_TRUE(Timeline::active());
  constexpr std::int64_t kElements = 1 << 16;  // large enough for the backend's data phase
  strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    Tensor grad = Tensor::zeros(DType::kFloat32, Shape{kElements});
    ctx->all_reduce(ReduceOp::kSum, grad);
    ctx->all_reduce(ReduceOp::kMean, grad);
    ctx->merge_call([](Strategy&) {});
  });
  EXPECT_TRUE(Timeline::stop());
  EXPECT_FALSE(Timeline::active());

  const json trace = read_trace(path);
  const std::vector<json> events = check_schema(trace);
  EXPECT_EQ(trace.at("otherData").at("dropped_events"), 0);
  EXPECT_TRUE(testing::python_loads(path));
  const std::map<std::pair<int, int>, std::string> names = testing::track_names(trace);
  EXPECT_EQ(names.at({0, -1}), "worker 0 on " + testing::host_name());
  EXPECT_EQ(names.at({0, 0}), "replica 0");
  EXPECT_EQ(names.at({0, 1}), "replica 1");

  const std::vector<std::pair<std::string, std::int64_t>> expected = {
      {"all_reduce", 1}, {"all_reduce", 2}, {"merge_call", 3}};
  for (int tid : {0, 1}) {
    SCOPED_TRACE(tid);
    EXPECT_EQ(collectives_of(events, tid), expected);
    EXPECT_EQ(count(events, tid, "run", "B"), 1);
    EXPECT_EQ(count(events, tid, "wait", "B"), 3);
    EXPECT_EQ(count(events, tid, "data", "B"), 2);
    for (const json& e : events) {
      if (e.at("tid") != tid || e.at("ph") != "B" || e.at("name") != "all_reduce") continue;
      EXPECT_EQ(e.at("args").at("kind"), "all_reduce");
      EXPECT_EQ(e.at("args").at("bytes"), kElements * 4);
      EXPECT_EQ(e.at("args").at("backend"), "SharedMemoryAllReduce");
    }
  }
  std::filesystem::remove(path);
}

TEST(Timeline, AsyncCollectivesHaveTheTrackOfTheirReplicasLane) {
  const std::string path = temp_path("timeline_async", ".json");
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  Timeline::start(path);
  constexpr std::int64_t kElements = 1 << 16;
  strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    Tensor grad = Tensor::zeros(DType::kFloat32, Shape{kElements});
    auto first = ctx->all_reduce_async(ReduceOp::kSum, grad);
    auto second = ctx->all_reduce_async(ReduceOp::kSum, grad);
    ctx->all_reduce(ReduceOp::kMean, grad);
    second.wait();
  });
  EXPECT_TRUE(Timeline::stop());

  const json trace = read_trace(path);
  const std::vector<json> events = check_schema(trace);
  const std::map<std::pair<int, int>, std::string> names = testing::track_names(trace);
  constexpr int kLane = 1 << 19;
  EXPECT_EQ(names.at({0, kLane}), "replica 0 async");
  EXPECT_EQ(names.at({0, kLane + 1}), "replica 1 async");
  const std::vector<std::pair<std::string, std::int64_t>> on_lane = {{"all_reduce", 1}, {"all_reduce", 2}};
  const std::vector<std::pair<std::string, std::int64_t>> on_replica = {{"all_reduce", 3}};
  for (int replica : {0, 1}) {
    SCOPED_TRACE(replica);
    EXPECT_EQ(collectives_of(events, kLane + replica), on_lane);
    EXPECT_EQ(collectives_of(events, replica), on_replica);
  }
  std::filesystem::remove(path);
}

TEST(Timeline, InputWaitsApplyGradientsAndCheckpointSavesHaveTheirSpans) {
  const std::string path = temp_path("timeline_training_events", ".json");
  const std::string checkpoint_path = temp_path("timeline_checkpoint", ".json");
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  StrategyScope scope = strategy.scope();
  Variable w(Tensor::from_vector<float>({1.0f, 2.0f}), VariableOptions{.name = "w"});
  optimizers::SGD sgd(0.1);
  Checkpoint checkpoint({{"w", w}});
  DistributedDataset<Tensor> dataset = strategy.experimental_distribute_dataset(data::range(8).batch(4));
  Timeline::start(path);
  for (const PerReplica<Tensor>& batch : dataset) {
    strategy.run([&] {
      (void)batch;
      sgd.apply_gradients({{Tensor::from_vector<float>({0.5f, -1.0f}), w}});
    });
  }
  checkpoint.save(checkpoint_path);
  Timeline::stop();

  const json trace = read_trace(path);
  const std::vector<json> events = check_schema(trace);
  const std::map<std::pair<int, int>, std::string> names = testing::track_names(trace);
  EXPECT_EQ(names.at({0, detail::timeline::kInputTrack}), "input");
  EXPECT_EQ(names.at({0, detail::timeline::kProgramTrack}), "program");
  // Two batches, then the wait that finds the end.
  EXPECT_EQ(count(events, detail::timeline::kInputTrack, "get_next", "B"), 3);
  EXPECT_EQ(count(events, 0, "apply_gradients", "B"), 2);
  EXPECT_EQ(count(events, 1, "apply_gradients", "B"), 2);
  EXPECT_EQ(count(events, detail::timeline::kProgramTrack, "checkpoint_save", "B"), 1);
  std::filesystem::remove(path);
  std::filesystem::remove(checkpoint_path);
}

TEST(Timeline, AFailingRunWritesABalancedFileWithAnErrorEvent) {
  const std::string path = temp_path("timeline_failing_run", ".json");
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  Timeline::start(path);
  EXPECT_THROW(strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    Tensor grad = Tensor::zeros(DType::kFloat32, Shape{4});
    ctx->all_reduce(ReduceOp::kSum, grad);
    if (ctx->replica_id_in_sync_group() == 1) throw InvalidArgumentError("replica 1 gave up");
    ctx->all_reduce(ReduceOp::kSum, grad);  // replica 0 is released from this one
  }),
               InvalidArgumentError);
  Timeline::stop();

  const std::vector<json> events = check_schema(read_trace(path));
  std::vector<std::string> errors_of_1;
  for (const json& e : events) {
    if (e.at("ph") == "i" && e.at("tid") == 1) errors_of_1.push_back(e.at("args").at("message"));
  }
  ASSERT_EQ(errors_of_1.size(), 1u);
  EXPECT_EQ(errors_of_1[0], "replica 1 gave up");
  EXPECT_EQ(count(events, 0, "error", "i"), 1);  // replica 0's release
  EXPECT_EQ(count(events, 0, "run", "E"), 1);
  EXPECT_EQ(count(events, 1, "run", "E"), 1);
  std::filesystem::remove(path);
}

// An exception's message is the user's bytes: one that is not UTF-8 is written with each invalid
// byte replaced by U+FFFD, and the trace keeps every event (it once lost the whole file to a
// nlohmann::json::type_error thrown from stop()).
TEST(Timeline, AnErrorMessageThatIsNotUtf8IsWrittenWithTheInvalidBytesReplaced) {
  const std::string path = temp_path("timeline_not_utf8", ".json");
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  Timeline::start(path);
  EXPECT_THROW(strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    if (ctx->replica_id_in_sync_group() == 1) throw std::runtime_error("bad \xff byte");
    ctx->all_reduce(ReduceOp::kSum, Tensor::scalar(1.0f));  // replica 0 is released from this one
  }),
               std::runtime_error);
  bool stopped = false;
  EXPECT_NO_THROW(stopped = Timeline::stop());
  EXPECT_TRUE(stopped);

  EXPECT_TRUE(testing::python_loads(path));
  const std::vector<json> events = check_schema(read_trace(path));
  std::map<int, std::vector<std::string>> errors;
  for (const json& e : events) {
    if (e.at("ph") == "i") errors[e.at("tid").get<int>()].push_back(e.at("args").at("message"));
  }
  EXPECT_EQ(errors[1], std::vector<std::string>{"bad \uFFFD byte"});
  ASSERT_EQ(errors[0].size(), 1u);
  EXPECT_NE(errors[0][0].find("replica 1 raised: bad \uFFFD byte"), std::string::npos) << errors[0][0];
  EXPECT_EQ(count(events, 0, "run", "E"), 1);
  EXPECT_EQ(count(events, 1, "run", "E"), 1);
  std::filesystem::remove(path);
}

TEST(Timeline, TheRingBufferDropsTheOldestAndCountsThemExactly) {
  const std::string path = temp_path("timeline_ring", ".json");
  Timeline::start(path, {.events_per_thread = 4});
  for (int i = 0; i < 10; ++i) detail::timeline::instant(7, "tick", std::to_string(i));
  Timeline::stop();
  const json trace = read_trace(path);
  const std::vector<json> events = check_schema(trace);
  EXPECT_EQ(trace.at("otherData").at("dropped_events"), 6);
  EXPECT_EQ(trace.at("otherData").at("events_per_thread"), 4);
  std::vector<std::string> kept;
  for (const json& e : events) kept.push_back(e.at("args").at("message"));
  EXPECT_EQ(kept, (std::vector<std::string>{"6", "7", "8", "9"}));
  std::filesystem::remove(path);
}

TEST(Timeline, AnEndWhoseBeginWasDroppedIsLeftOutAndAnOpenSpanIsClosedAtStop) {
  const std::string path = temp_path("timeline_ring_spans", ".json");
  Timeline::start(path, {.events_per_thread = 3});
  { detail::timeline::Span first(0, "first"); }
  { detail::timeline::Span second(0, "second"); }
  detail::timeline::Span open(0, "open");  // ends after stop(): stop closes it
  Timeline::stop();
  const json trace = read_trace(path);
  const std::vector<json> events = check_schema(trace);
  // B first, E first, B second, E second, B open: the ring kept the last 3.
  EXPECT_EQ(trace.at("otherData").at("dropped_events"), 2);
  std::vector<std::string> seen;
  for (const json& e : events) seen.push_back(e.at("ph").get<std::string>() + " " + e.at("name").get<std::string>());
  EXPECT_EQ(seen, (std::vector<std::string>{"B second", "E second", "B open", "E open"}));
  std::filesystem::remove(path);
}

TEST(Timeline, NothingIsRecordedWhileOff) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  EXPECT_FALSE(Timeline::active());
  strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::scalar(1.0f)); });
  const std::string path = temp_path("timeline_off", ".json");
  Timeline::start(path);
  Timeline::stop();
  EXPECT_TRUE(check_schema(read_trace(path)).empty());
  std::filesystem::remove(path);
}

TEST(Timeline, AnUnwritablePathIsAnInvalidArgumentAtStart) {
  const std::string path = "/nonexistent-directory/timeline.json";
  try {
    Timeline::start(path);
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(std::string(e.what()), "Timeline::start: cannot write the timeline to \"" + path +
                                         "\": No such file or directory");
  }
  EXPECT_FALSE(Timeline::active());
}

TEST(Timeline, StartingTwiceIsAFailedPreconditionNamingBothPaths) {
  const std::string path = temp_path("timeline_twice", ".json");
  Timeline::start(path);
  try {
    Timeline::start("/tmp/other.json");
    FAIL() << "no error";
  } catch (const FailedPreconditionError& e) {
    EXPECT_EQ(std::string(e.what()), "Timeline::start(\"/tmp/other.json\"): a timeline is recording into \"" + path +
                                         "\" already; call Timeline::stop() first");
  }
  EXPECT_TRUE(Timeline::stop());
  std::filesystem::remove(path);
}

TEST(Timeline, StopWithoutStartDoesNothing) {
  EXPECT_FALSE(Timeline::stop());
  const std::string path = temp_path("timeline_stop_twice", ".json");
  Timeline::start(path);
  EXPECT_TRUE(Timeline::stop());
  EXPECT_FALSE(Timeline::stop());
  std::filesystem::remove(path);
}

TEST(Timeline, AnEmptyRingIsAnInvalidArgument) {
  try {
    Timeline::start(temp_path("timeline_empty_ring", ".json"), {.events_per_thread = 0});
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(std::string(e.what()), "Timeline::start: TimelineOptions::events_per_thread is 0; each thread needs "
                                     "room for one event at least");
  }
  EXPECT_FALSE(Timeline::active());
}

TEST(Timeline, AWriteThatFailsAtStopIsAnInternalError) {
  Timeline::start("/dev/full");  // opens, and refuses every write: no space left
  detail::timeline::instant(0, "tick", "x");
  try {
    Timeline::stop();
    FAIL() << "no error";
  } catch (const InternalError& e) {
    EXPECT_EQ(std::string(e.what()), "Timeline::stop: writing the timeline to \"/dev/full\" failed: No space left on device");
  }
  EXPECT_FALSE(Timeline::active());
}

TEST(TimelineEnvironment, DistributeTimelineStartsAtTheFirstStrategyAndWritesAtExit) {
  // A fresh process (the threadsafe style runs the test again in one), since the variable is read
  // once, at the program's first strategy.
  // The child runs this body again as another process, so the path is named after the binary (one
  // per build), not the process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string binary = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("timeline_environment." + std::to_string(std::hash<std::string>{}(binary)) + ".json"))
                               .string();
  std::filesystem::remove(path);
  EXPECT_EXIT(
      {
        setenv("DISTRIBUTE_TIMELINE", path.c_str(), 1);
        MirroredStrategy strategy({"CPU:0", "CPU:1"});
        if (!Timeline::active()) std::exit(2);
        strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::scalar(1.0f)); });
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  const std::vector<json> events = check_schema(read_trace(path));
  for (int tid : {0, 1}) {
    EXPECT_EQ(collectives_of(events, tid), (std::vector<std::pair<std::string, std::int64_t>>{{"all_reduce", 1}}));
  }
  std::filesystem::remove(path);
}

TEST(TimelineEnvironment, AnUnwritablePathIsAnInvalidArgumentFromTheFirstStrategy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("DISTRIBUTE_TIMELINE", "/nonexistent-directory/timeline.json", 1);
        try {
          MirroredStrategy strategy({"CPU:0", "CPU:1"});
        } catch (const InvalidArgumentError& e) {
          std::cerr << e.what() << "\n";
          std::exit(Timeline::active() ? 2 : 0);
        }
        std::exit(1);
      },
      ::testing::ExitedWithCode(0),
      "Timeline::start: cannot write the timeline to \"/nonexistent-directory/timeline.json\": No such file or "
      "directory");
}

TEST(CollectiveStats, AReplicaThatArrivesLateIsTheLastInEveryCollectiveAndTheOthersWaitForIt) {
  MirroredStrategy strategy({"CPU:0", "CPU:1", "CPU:2"});
  constexpr int kCollectives = 5;
  const auto started = std::chrono::steady_clock::now();
  strategy.run([] {
    ReplicaContext* ctx = get_replica_context();
    for (int i = 0; i < kCollectives; ++i) {
      if (ctx->replica_id_in_sync_group() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      // A scalar takes the small path, a large tensor the rendezvous: both count.
      if (i % 2 == 0) {
        ctx->all_reduce(ReduceOp::kSum, 1.0f);
      } else {
        ctx->all_reduce(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{1 << 16}));
      }
    }
  });
  const double run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CollectiveStats stats = strategy.extended().collective_stats();
  EXPECT_EQ(stats.worker_id, 0);
  EXPECT_EQ(stats.cross_worker_seconds, 0.0);  // one process: no step across workers
  ASSERT_EQ(stats.replicas.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const ReplicaCollectiveStats& replica = stats.replicas[static_cast<std::size_t>(r)];
    SCOPED_TRACE(r);
    EXPECT_EQ(replica.replica_id, r);
    EXPECT_EQ(replica.collectives, kCollectives);
    EXPECT_EQ(replica.last_arrivals, r == 1 ? kCollectives : 0);
    // The late replica never waits; the others wait for its sleep, 20 ms each time (at least 10).
    if (r == 1) {
      EXPECT_EQ(replica.wait_seconds, 0.0);
    } else {
      EXPECT_GT(replica.wait_seconds, kCollectives * 0.010);
      EXPECT_LT(replica.wait_seconds, run_seconds);
    }
  }
  ASSERT_NE(stats.slowest(), nullptr);
  EXPECT_EQ(stats.slowest()->replica_id, 1);

  strategy.extended().reset_collective_stats();
  stats = strategy.extended().collective_stats();
  for (const ReplicaCollectiveStats& replica : stats.replicas) {
    EXPECT_EQ(replica.collectives, 0);
    EXPECT_EQ(replica.last_arrivals, 0);
    EXPECT_EQ(replica.wait_seconds, 0.0);
  }
  EXPECT_EQ(stats.slowest(), nullptr);
}

TEST(CollectiveStats, AStrategyOfOneDeviceHasNoReplicasToList) {
  OneDeviceStrategy strategy("CPU:0");
  EXPECT_TRUE(strategy.extended().collective_stats().replicas.empty());
}

}  // namespace
}  // namespace distribute
