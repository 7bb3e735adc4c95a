// The cluster layer's Gloo backend (cluster/gloo/gloo_worker_transport.h), between real
// processes: each test forks its workers, which meet through a file store in a directory of the
// test's own or a Redis server the test starts on loopback, then exchange and reduce over Gloo's
// TCP pairs. A worker's failed expectation is its exit status, which the test reads.
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <fcntl.h>
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
#include <string>
#include <thread>
#include <vector>

#include "cluster/gloo/gloo_worker_transport.h"
#include "distribute/errors.h"

namespace distribute::cluster::gloo_backend {
namespace {

using namespace std::chrono_literals;

detail::Deadline in(std::chrono::milliseconds timeout) { return detail::Clock::now() + timeout; }

// Runs `body(rank)` in `workers` forked processes and expects each to exit 0 (a worker exits 1 when
// one of its expectations failed) within `limit`; kills the ones still running then.
void run_workers(int workers, const std::function<void(int)>& body, std::chrono::seconds limit = 60s) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < workers; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      try {
        body(rank);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "worker " << rank << " threw: " << e.what();
      }
      std::fflush(stderr);
      std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int rank = 0; rank < workers; ++rank) {
    int status = 0;
    while (waitpid(pids[rank], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], &status, 0);
        ADD_FAILURE() << "worker " << rank << " still ran after " << limit.count() << " s";
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "worker " << rank << " ended with status " << status;
  }
}

// A directory of the test's own for a file store.
class StoreDirectory {
 public:
  StoreDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "gloo_store_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~StoreDirectory() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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
    ::gloo::rendezvous::FileStore store(directory.path());
    GlooWorkerTransport transport(store, options(rank, 3));
    exercise(transport);
  });
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
      const int s = socket(AF_INET, SOCK_STREAM, 0);
      ready_ = connect(s, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
      close(s);
      if (!ready_) std::this_thread::sleep_for(10ms);
    }
  }
  ~RedisServer() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  bool ready() const { return ready_; }
  int port() const { return port_; }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
  bool ready_ = false;
};

bool redis_installed() { return std::system("command -v redis-server > /dev/null 2>&1") == 0; }

TEST(GlooTransport, WorkersMeetingThroughARedisServerExchangeAndReduceExactly) {
  if (!redis_installed()) GTEST_SKIP() << "redis-server is not installed (Debian: redis-server)";
  RedisServer redis;
  ASSERT_TRUE(redis.ready()) << "redis-server did not start on port " << redis.port();
  run_workers(2, [&](int rank) {
    ::gloo::rendezvous::RedisStore store("127.0.0.1", redis.port());
    GlooWorkerTransport transport(store, options(rank, 2));
    exercise(transport);
  });
}

TEST(GlooTransport, AWorkerThatNeverArrivesIsNamedWhenTheConnectTimeoutPasses) {
  StoreDirectory directory;
  run_workers(3, [&](int rank) {
    if (rank == 2) return;  // never comes to the store
    ::gloo::rendezvous::FileStore store(directory.path());
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
    ::gloo::rendezvous::FileStore store(directory.path());
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
// kFailStrategy it throws and the process goes on.
TEST(GlooTransport, ADataPhaseWhosePeerStopsAnsweringFailsAtItsDeadline) {
  StoreDirectory directory;
  run_workers(2, [&](int rank) {
    ::gloo::rendezvous::FileStore store(directory.path());
    GlooWorkerTransport transport(store, options(rank, 2));
    if (rank == 1) {
      std::this_thread::sleep_for(3s);  // alive, connected, and silent
      return;
    }
    std::vector<float> data(1000, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      transport.all_reduce(DType::kFloat32, data.data(), 1000, Compression::kNone, in(500ms), "all_reduce #7");
      ADD_FAILURE() << "no error";
    } catch (const DeadlineExceededError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("worker 0: the data phase of all_reduce #7 failed between the workers (Gloo: ", 0), 0u)
          << message;
      EXPECT_NE(message.find("; the strategy is unusable and the job goes on (StalledCollectiveAction::kFailStrategy)"),
                std::string::npos)
          << message;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  });
}

}  // namespace
}  // namespace distribute::cluster::gloo_backend
