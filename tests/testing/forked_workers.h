// Tests whose workers are forked processes (the Gloo backend's, the elastic jobs'): run_workers
// forks them and reads each one's exit status, StoreDirectory is a file store's directory of the
// test's own.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace distribute::testing {

// Runs `body(rank)` in `workers` forked processes and expects each to exit 0 (a worker exits 1 when
// one of its expectations failed) within `limit`; kills the ones still running then.
inline void run_workers(int workers, const std::function<void(int)>& body, std::chrono::seconds limit = std::chrono::seconds(60)) {
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
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
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

}  // namespace distribute::testing
