// The cluster layer's Gloo backend (cluster/gloo/gloo_worker_transport.h), between real
// processes: each test forks its workers, which meet through a file store in a directory of the
// test's own or a Redis server the test starts on loopback, then exchange and reduce over Gloo's
// TCP pairs. Then MultiWorkerMirroredStrategy over Gloo the same way: workers started with a
// launcher's variables, with TF_CONFIG, alone, and the rendezvous errors. A worker's failed
// expectation is its exit status, which the test reads.
#include <gloo/rendezvous/redis_store.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/gloo/gloo_worker_transport.h"
#include "distribute/distribute.h"
#include "distribute/errors.h"
#include "testing/forked_workers.h"

namespace distribute::cluster::gloo_backend {
namespace {

using namespace std::chrono_literals;
using testing::run_workers;
using testing::StoreDirectory;

detail::Deadline in(std::chrono::milliseconds timeout) { return detail::Clock::now() + timeout; }

GlooTransportOptions options(int rank, int workers, std::chrono::milliseconds connect_timeout = 20s) {
  return {.rank = rank, .workers = workers, .prefix = "test", .hostname = "127.0.0.1",
          .connect_timeout = connect_timeout, .on_stall = OnStall::kFailStrategy};
}

// What every worker checks once connected: the exchanges and every data phase, with exact results.
void exercise(GlooWorkerTransport& transport) {
  const int workers = transport.num_workers();
  const int rank = transport.worker_id();
  EXPECT_EQ(static_cast<int>(transport.hosts().size()), workers);
  EXPECT_EQ(transport.workers_on_this_host(), workers);

  // An exchange: every worker's bytes, in worker order.
  const std::int64_t mine = 100 + rank;
  std::vector<std::int64_t> all(static_cast<std::size_t>(workers));
  EXPECT_TRUE(transport.exchange(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)), in(10s))
                  .empty());
  for (int w = 0; w < workers; ++w) EXPECT_EQ(all[static_cast<std::size_t>(w)], 100 + w);
  EXPECT_TRUE(
      transport.exchange_input(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)), in(10s))
          .empty());

  // all_reduce around the ring: floats whose sums are exact, int64, and bfloat16 on the wire.
  std::vector<float> floats(100003);
  for (std::size_t i = 0; i < floats.size(); ++i) floats[i] = static_cast<float>((i % 1000) * (rank + 1));
  EXPECT_EQ(transport.all_reduce(DType::kFloat32, floats.data(), static_cast<std::int64_t>(floats.size()),
                                 Compression::kNone, in(10s), "float all_reduce"),
            -1);
  const float factor = static_cast<float>(workers * (workers + 1) / 2);
  for (std::size_t i = 0; i < floats.size(); ++i) {
    ASSERT_EQ(floats[i], static_cast<float>(i % 1000) * factor) << "element " << i;
  }
  std::vector<std::int64_t> ints = {rank, 1, std::int64_t{1} << 40};
  transport.all_reduce(DType::kInt64, ints.data(), 3, Compression::kNone, in(10s), "int all_reduce");
  EXPECT_EQ(ints, (std::vector<std::int64_t>{workers * (workers - 1) / 2, workers, workers * (std::int64_t{1} << 40)}));
  std::vector<float> halves(5, 0.5f);
  EXPECT_EQ(transport.all_reduce(DType::kFloat32, halves.data(), 5, Compression::kBfloat16, in(10s), "bf16"), -1);
  EXPECT_EQ(halves, std::vector<float>(5, 0.5f * static_cast<float>(workers)));

  // all_gather of a different size from each worker (worker 0 gives nothing).
  std::vector<std::size_t> sizes;
  for (int w = 0; w < workers; ++w) sizes.push_back(static_cast<std::size_t>(w) * 3);
  const std::string piece(sizes[static_cast<std::size_t>(rank)], static_cast<char>('a' + rank));
  std::string gathered(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}), '?');
  transport.all_gather(piece.data(), sizes, gathered.data(), in(10s), "all_gather");
  std::string expected;
  for (int w = 0; w < workers; ++w) expected += std::string(sizes[static_cast<std::size_t>(w)], static_cast<char>('a' + w));
  EXPECT_EQ(gathered, expected);

  // broadcast from the last worker.
  std::int64_t value = rank == workers - 1 ? 42 : -1;
  transport.broadcast(&value, sizeof value, workers - 1, in(10s), "broadcast");
  EXPECT_EQ(value, 42);
}

TEST(GlooTransport, WorkersMeetingThroughAFileStoreExchangeAndReduceExactly) {
  StoreDirectory directory;
  run_workers(3, [&](int rank) {
    FileStore store(directory.path());
    GlooWorkerTransport transport(store, options(rank, 3));
    exercise(transport);
  });
}

// Whether something accepts connections on loopback's `port`.
bool accepting(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  const bool connected = connect(s, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(s);
  return connected;
}

// redis-server on a free loopback port, for the length of a test.
class RedisServer {
 public:
  RedisServer() {
    const int probe = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof address);
    getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    close(probe);
    pid_ = fork();
    if (pid_ == 0) {
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, STDOUT_FILENO);
      const std::string port = std::to_string(port_);
      execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    // Ready once it accepts a connection.
    for (int attempt = 0; attempt < 500 && !ready_; ++attempt) {
      ready_ = accepting(port_);
      if (!ready_) std::this_thread::sleep_for(10ms);
    }
  }
  ~RedisServer() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  bool ready() const { return ready_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
  bool ready_ = false;
};

// A redis-server of the test's own on loopback, started before the test and stopped after it; the
// test skips where redis-server is not installed.
class WithRedisServer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v redis-server > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "redis-server is not installed (Debian: redis-server)";
    }
    redis.emplace();
    ASSERT_TRUE(redis->ready()) << "redis-server did not start on port " << redis->port();
  }
  std::string address() const { return "redis://127.0.0.1:" + std::to_string(redis->port()); }
  std::optional<RedisServer> redis;
};
using GlooTransportOverRedis = WithRedisServer;
using GlooStrategyOverRedis = WithRedisServer;

TEST_F(GlooTransportOverRedis, WorkersMeetingThroughARedisServerExchangeAndReduceExactly) {
  run_workers(2, [&](int rank) {
    ::gloo::rendezvous::RedisStore store("127.0.0.1", redis->port());
    GlooWorkerTransport transport(store, options(rank, 2));
    exercise(transport);
  });
}

TEST(GlooTransport, AWorkerThatNeverArrivesIsNamedWhenTheConnectTimeoutPasses) {
  StoreDirectory directory;
  run_workers(3, [&](int rank) {
    if (rank == 2) return;  // never comes to the store
    FileStore store(directory.path());
    try {
      GlooWorkerTransport transport(store, options(rank, 3, 1000ms));
      ADD_FAILURE() << "no error";
    } catch (const DeadlineExceededError& e) {
      EXPECT_EQ(std::string(e.what()), "GlooWorkerTransport: worker " + std::to_string(rank) +
                                           " waited 1000 ms at the rendezvous store for workers 2 of 3, which did "
                                           "not arrive");
    }
  });
}

// Worker 2 connects, then leaves (its process ends): the others' exchange names it, and the
// transport, whose pairs Gloo has failed, refuses every later call saying why.
TEST(GlooTransport, AWorkerThatLeavesIsNamedAndTheTransportThenRefusesEveryCall) {
  StoreDirectory directory;
  run_workers(3, [&](int rank) {
    FileStore store(directory.path());
    GlooWorkerTransport transport(store, options(rank, 3));
    if (rank == 2) std::_Exit(0);
    std::int64_t mine = rank;
    std::vector<std::int64_t> all(3);
    const std::vector<int> missing =
        transport.exchange(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)), in(5s));
    EXPECT_EQ(missing, std::vector<int>{2});
    try {
      transport.exchange(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)), in(5s));
      ADD_FAILURE() << "no error";
    } catch (const UnavailableError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("GlooWorkerTransport: the connections between the workers broke at an "
                                            "exchange of the workers' agreement (",
                                            0),
                0u)
          << e.what();
    }
  });
}

// A data phase whose peer stops answering fails at its deadline, naming the step; with
// kFailStrategy it throws and the process goes on. A small sum (one round of messages) and a
// large one (the ring, whose write to the silent peer blocks once the socket's buffers are full).
void expect_a_silent_peer_fails_the_data_phase_at_its_deadline(std::int64_t count) {
  StoreDirectory directory;
  run_workers(2, [&](int rank) {
    FileStore store(directory.path());
    GlooWorkerTransport transport(store, options(rank, 2));
    if (rank == 1) {
      std::this_thread::sleep_for(3s);  // alive, connected, and silent
      return;
    }
    std::vector<float> data(static_cast<std::size_t>(count), 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      transport.all_reduce(DType::kFloat32, data.data(), count, Compression::kNone, in(500ms), "all_reduce #7");
      ADD_FAILURE() << "no error";
    } catch (const DeadlineExceededError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("worker 0: the data phase of all_reduce #7 failed between the workers (worker 1 on " +
                                  transport.hosts()[1] + " did not answer; the step's deadline passed first)",
                              0),
                0u)
          << message;
      EXPECT_NE(message.find("; the strategy is unusable and the job goes on (StalledCollectiveAction::kFailStrategy)"),
                std::string::npos)
          << message;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  });
}

TEST(GlooTransport, ASmallDataPhaseWhosePeerStopsAnsweringFailsAtItsDeadline) {
  expect_a_silent_peer_fails_the_data_phase_at_its_deadline(1000);
}

TEST(GlooTransport, ARingDataPhaseWhosePeerStopsAnsweringFailsAtItsDeadline) {
  expect_a_silent_peer_fails_the_data_phase_at_its_deadline(std::int64_t{16} << 20);  // 64 MiB
}

// MultiWorkerMirroredStrategy over Gloo, as a program without mpirun makes it.

MultiWorkerMirroredStrategyOptions gloo_strategy_options() {
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = {"CPU:0", "CPU:1"};
  options.backend = CollectiveBackend::kGloo;
  options.communication.timeout = 20s;
  return options;
}

// Every replica of `strategy` sums 1.0 and gets the number of replicas of the job.
void expect_sums_over_every_replica(MultiWorkerMirroredStrategy& strategy) {
  const PerReplica<float> sums =
      strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  EXPECT_EQ(sums.values(), std::vector<float>(2, static_cast<float>(strategy.num_replicas_in_sync())));
}

TEST(GlooStrategy, AProgramRunAloneIsAJobOfOneWorkerThatNeedsNoStore) {
  run_workers(1, [](int) {
    unsetenv("DISTRIBUTE_RENDEZVOUS");
    MultiWorkerMirroredStrategy strategy(gloo_strategy_options());
    EXPECT_EQ(strategy.backend(), CollectiveBackend::kGloo);
    EXPECT_EQ(strategy.name(), "MultiWorkerMirroredStrategy(worker 0 of 1 over Gloo: CPU:0, CPU:1)");
    EXPECT_EQ(strategy.cluster_resolver().cluster_spec().num_tasks("worker"), 1);
    expect_sums_over_every_replica(strategy);
  });
}

// Workers a shell loop started, each told its rank, the world size and the store in variables.
TEST(GlooStrategy, WorkersStartedWithTheLaunchersVariablesMeetAtTheFileStore) {
  StoreDirectory directory;
  run_workers(3, [&](int rank) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("DISTRIBUTE_RENDEZVOUS", ("file://" + directory.path()).c_str(), 1);
    MultiWorkerMirroredStrategyOptions options = gloo_strategy_options();
    options.backend = CollectiveBackend::kAuto;  // no MPI launcher: Gloo
    MultiWorkerMirroredStrategy strategy(options);
    EXPECT_EQ(strategy.backend(), CollectiveBackend::kGloo);
    EXPECT_EQ(strategy.extended().worker_id(), rank);
    EXPECT_EQ(strategy.num_replicas_in_sync(), 6);
    expect_sums_over_every_replica(strategy);
  });
}

// Workers TF_CONFIG describes, with a chief, meeting at a Redis server named in the options; each
// accepts its peers on its task's host.
TEST_F(GlooStrategyOverRedis, TFConfigWorkersWithAChiefMeetAtARedisServer) {
  run_workers(2, [&](int rank) {
    MultiWorkerMirroredStrategyOptions options = gloo_strategy_options();
    const std::string task = rank == 0 ? R"({"type": "chief", "index": 0})" : R"({"type": "worker", "index": 0})";
    options.cluster_resolver = std::make_shared<TFConfigClusterResolver>(TFConfigClusterResolverOptions{
        .tf_config = R"({"cluster": {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}, "task": )" + task +
                     "}"});
    options.gloo.rendezvous = address();
    MultiWorkerMirroredStrategy strategy(options);
    EXPECT_EQ(strategy.extended().worker_id(), rank);
    EXPECT_EQ(strategy.cluster_resolver().task_type(), rank == 0 ? "chief" : "worker");
    expect_sums_over_every_replica(strategy);
  });
}

// A second run of a job under the same id finds the first one's keys, which would have it connect
// to addresses of processes long gone: it is refused, saying what to change.
TEST(GlooStrategy, ARunFindingAPreviousRunsKeysIsRefused) {
  StoreDirectory directory;
  MultiWorkerMirroredStrategyOptions options = gloo_strategy_options();
  options.gloo.rendezvous = "file://" + directory.path();
  options.gloo.job_id = "nightly";
  run_workers(1, [&](int) {
    MultiWorkerMirroredStrategy strategy(options);
    expect_sums_over_every_replica(strategy);
  });
  run_workers(1, [&](int) {
    try {
      MultiWorkerMirroredStrategy again(options);
      ADD_FAILURE() << "no error";
    } catch (const FailedPreconditionError& e) {
      EXPECT_STREQ(e.what(),
                   "GlooWorkerTransport: the rendezvous store already holds worker 0's keys under "
                   "\"nightly/strategy-0\": two processes of this job were given the same rank, or another run of "
                   "this job (or a job of the same id) left them; give each process its own rank, and each run its "
                   "own job id (GlooOptions::job_id, DISTRIBUTE_JOB_ID) or a fresh store");
    }
  });
}

// Without a job id of its own, a run takes its launcher's: Slurm's job and step. A second step of
// the job meets under keys of its own; the same step run again is refused, naming them.
TEST(GlooStrategy, TheLaunchersRunIdNamesTheKeys) {
  StoreDirectory directory;
  MultiWorkerMirroredStrategyOptions options = gloo_strategy_options();
  options.gloo.rendezvous = "file://" + directory.path();
  const auto run_step = [&](const char* step, const std::string& refusal) {
    run_workers(1, [&](int) {
      unsetenv("DISTRIBUTE_JOB_ID");
      unsetenv("TORCHELASTIC_RUN_ID");
      setenv("SLURM_JOB_ID", "4242", 1);
      setenv("SLURM_STEP_ID", step, 1);
      try {
        MultiWorkerMirroredStrategy strategy(options);
        EXPECT_EQ(refusal, "") << "no error";
        expect_sums_over_every_replica(strategy);
      } catch (const FailedPreconditionError& e) {
        EXPECT_NE(refusal, "") << "refused: " << e.what();
        EXPECT_THAT(e.what(), ::testing::HasSubstr(refusal));
      }
    });
  };
  run_step("0", "");
  run_step("1", "");
  run_step("1", "already holds worker 0's keys under \"4242.1/strategy-0\"");
}

// A job of several workers with no store named anywhere, and stores that cannot be used: each is
// refused before any worker waits.
TEST(GlooStrategy, AMissingOrUnusableRendezvousIsRefusedSayingWhatToGive) {
  run_workers(1, [](int) {
    unsetenv("DISTRIBUTE_RENDEZVOUS");
    MultiWorkerMirroredStrategyOptions options = gloo_strategy_options();
    options.cluster_resolver = std::make_shared<TFConfigClusterResolver>(TFConfigClusterResolverOptions{
        .tf_config = R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})"});
    const auto refusal = [&](const std::string& rendezvous) -> std::string {
      options.gloo.rendezvous = rendezvous;
      try {
        MultiWorkerMirroredStrategy strategy(options);
        return "no error";
      } catch (const InvalidArgumentError& e) {
        return std::string("InvalidArgumentError: ") + e.what();
      } catch (const FailedPreconditionError& e) {
        return std::string("FailedPreconditionError: ") + e.what();
      } catch (const UnavailableError& e) {
        return std::string("UnavailableError: ") + e.what();
      }
    };
    EXPECT_EQ(refusal(""),
              "InvalidArgumentError: MultiWorkerMirroredStrategy over Gloo: the job has 2 workers, which meet at a "
              "rendezvous store, but none is given: set options.gloo.rendezvous or DISTRIBUTE_RENDEZVOUS to "
              "redis://HOST:PORT (a redis-server every worker reaches) or file:///DIR (a directory every worker "
              "shares)");
    EXPECT_EQ(refusal("http://store:80"),
              "InvalidArgumentError: MultiWorkerMirroredStrategy over Gloo: the rendezvous address "
              "\"http://store:80\" (options.gloo.rendezvous) is neither redis://HOST:PORT nor file:///DIR");
    EXPECT_EQ(refusal("redis://store:port"),
              "InvalidArgumentError: MultiWorkerMirroredStrategy over Gloo: the rendezvous address "
              "\"redis://store:port\" (options.gloo.rendezvous) has no port number after its host; give "
              "redis://HOST:PORT");
    EXPECT_EQ(refusal("file:///no/such/directory"),
              "FailedPreconditionError: MultiWorkerMirroredStrategy over Gloo: the rendezvous address "
              "\"file:///no/such/directory\" (options.gloo.rendezvous) is no directory; create "
              "\"/no/such/directory\" on a file system every worker shares");
    options.gloo.rendezvous_timeout = std::chrono::milliseconds(0);
    EXPECT_EQ(refusal("file:///tmp"),
              "InvalidArgumentError: MultiWorkerMirroredStrategy over Gloo: options.gloo.rendezvous_timeout is 0 ms; "
              "give the workers a positive time to meet (60 s by default)");
    options.gloo.rendezvous_timeout = std::chrono::seconds(60);
    // Port 1 on loopback: nothing listens there.
    EXPECT_THAT(refusal("redis://127.0.0.1:1"),
                ::testing::StartsWith("UnavailableError: MultiWorkerMirroredStrategy over Gloo: cannot reach the "
                                      "Redis server at 127.0.0.1:1 (options.gloo.rendezvous): "));
    EXPECT_THAT(refusal("redis://127.0.0.1:1"),
                ::testing::EndsWith("; start one there (redis-server --port 1 --save '' --appendonly no) or give "
                                    "another address"));
  });
}

// The store serves only while the workers meet: a Redis server killed during training loses no
// step of the strategy made through it, and the next strategy, which must meet again, is refused
// with UnavailableError naming the server.
TEST_F(GlooStrategyOverRedis, ARedisServerKilledMidTrainingLosesNothingAndTheNextMeetingIsRefused) {
  run_workers(2, [&](int rank) {
    MultiWorkerMirroredStrategyOptions options = gloo_strategy_options();
    options.cluster_resolver = std::make_shared<TFConfigClusterResolver>(TFConfigClusterResolverOptions{
        .tf_config = R"({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": )" +
                     std::to_string(rank) + "}}"});
    options.gloo.rendezvous = address();
    MultiWorkerMirroredStrategy strategy(options);
    expect_sums_over_every_replica(strategy);
    if (rank == 0) {
      kill(redis->pid(), SIGKILL);
      while (accepting(redis->port())) std::this_thread::sleep_for(10ms);
    }
    expect_sums_over_every_replica(strategy);  // after worker 0 saw the server gone
    try {
      MultiWorkerMirroredStrategy next(options);
      ADD_FAILURE() << "no error";
    } catch (const UnavailableError& e) {
      EXPECT_THAT(e.what(), ::testing::StartsWith("MultiWorkerMirroredStrategy over Gloo: cannot reach the Redis "
                                                  "server at 127.0.0.1:" +
                                                  std::to_string(redis->port()) + " (options.gloo.rendezvous): "));
    }
    expect_sums_over_every_replica(strategy);
  });
}

}  // namespace
}  // namespace distribute::cluster::gloo_backend
