// What one small message costs over Gloo's TCP pairs, in the two ways Gloo offers to wait for
// it, between two processes of this machine (the program forks the second; they meet through a
// file store and connect over 127.0.0.1, or the address given):
//   - event thread: unbound buffers, each receive posted one message ahead. Gloo's event thread
//     reads the socket and wakes the waiting thread. The Gloo backend's large messages go so.
//   - synchronous pair: the waiting thread reads the socket itself (Pair::setSync), with bound
//     buffers registered once. The Gloo backend's small messages go so, each read polled against
//     its step's deadline first (PolledMesh in cluster/gloo/gloo_worker_transport.cc).
// Each line is the median round trip (a message each way) over --rounds rounds of --iters, in
// microseconds. mpi_all_reduce_bench beside it gives Open MPI's figure for the same machine.
// The gap between the two ways is what Gloo's hand-over between its threads costs here
// (docs/multi_worker.md, "Gloo against MPI").
//
//   ./build/default/bench/gloo_pair_bench --bytes=4,256,16K
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common.h"

ABSL_FLAG(std::string, bytes, "4,256,16K", "message sizes, comma-separated (K, M suffixes: powers of 1024)");
ABSL_FLAG(int, iters, 1000, "round trips per timed round");
ABSL_FLAG(int, rounds, 5, "timed rounds per size and way (the median is reported)");
ABSL_FLAG(std::string, address, "127.0.0.1", "the address both processes listen on");

namespace distribute::bench {
namespace {

constexpr std::uint64_t kSlot = 7;

using Clock = std::chrono::steady_clock;

// Rank 0 sends first and waits for the answer; rank 1 answers. Returns rank 0's seconds per round trip.
double event_thread_round_trip(gloo::Context& context, std::size_t bytes, int iters) {
  const int peer = 1 - context.rank;
  std::vector<char> out(bytes, 1);
  std::vector<char> in(bytes, 0);
  auto send = context.createUnboundBuffer(out.data(), bytes);
  auto receive = context.createUnboundBuffer(in.data(), bytes);
  receive->recv(peer, kSlot);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (context.rank == 0) {
      send->send(peer, kSlot);
      send->waitSend();
    }
    receive->waitRecv();
    if (i + 1 < iters) receive->recv(peer, kSlot);  // the next message's receive, posted ahead
    if (context.rank == 1) {
      send->send(peer, kSlot);
      send->waitSend();
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

double synchronous_round_trip(gloo::rendezvous::Context& context, gloo::rendezvous::Store& store, std::size_t bytes,
                              int iters, const std::string& key) {
  const int peer = 1 - context.rank;
  std::vector<char> out(bytes, 1);
  std::vector<char> in(bytes, 0);
  auto& pair = context.getPair(peer);
  // Each direction on a slot of its own; a bound buffer must be registered before bytes come.
  auto send = pair->createSendBuffer(context.rank == 0 ? 1 : 2, out.data(), bytes);
  auto receive = pair->createRecvBuffer(context.rank == 0 ? 2 : 1, in.data(), bytes);
  store.set(absl::StrCat(key, "/", context.rank), {'1'});
  store.wait({absl::StrCat(key, "/", peer)});
  pair->setSync(true, false);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (context.rank == 0) {
      send->send();
      send->waitSend();
      receive->waitRecv();
    } else {
      receive->waitRecv();
      send->send();
      send->waitSend();
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

int run(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<std::size_t> sizes;
  for (const std::string& text : std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_bytes), ','))) {
    sizes.push_back(parse_size(text));
    if (sizes.back() == 0) throw std::invalid_argument("--bytes takes sizes of at least 1 byte");
  }
  const int iters = absl::GetFlag(FLAGS_iters);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / absl::StrCat("gloo_pair_bench.", getpid());
  std::filesystem::create_directories(dir);
  const pid_t child = fork();
  const int rank = child == 0 ? 1 : 0;
  gloo::rendezvous::FileStore files(dir.string());
  gloo::transport::tcp::attr attr;
  attr.hostname = absl::GetFlag(FLAGS_address);
  auto device = gloo::transport::tcp::CreateDevice(attr);
  if (rank == 0) std::printf("%10s %24s %24s\n", "bytes", "event thread (us)", "synchronous pair (us)");
  for (std::size_t bytes : sizes) {
    std::vector<double> event_thread;
    std::vector<double> synchronous;
    for (int r = 0; r < rounds; ++r) {
      // A context per measurement: a pair once synchronous stays so.
      const std::string key = absl::StrCat(bytes, "/", r);
      gloo::rendezvous::PrefixStore store(key, files);
      auto a = std::make_shared<gloo::rendezvous::Context>(rank, 2);
      a->connectFullMesh(store, device);
      event_thread.push_back(event_thread_round_trip(*a, bytes, iters));
      gloo::rendezvous::PrefixStore sync_store(key + "/sync", files);
      auto b = std::make_shared<gloo::rendezvous::Context>(rank, 2);
      b->connectFullMesh(sync_store, device);
      synchronous.push_back(synchronous_round_trip(*b, sync_store, bytes, iters, "registered"));
    }
    if (rank == 0) std::printf("%10zu %24.1f %24.1f\n", bytes, median(event_thread) * 1e6, median(synchronous) * 1e6);
  }
  if (rank == 1) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  std::filesystem::remove_all(dir);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  return distribute::bench::main_reporting_errors("gloo_pair_bench", distribute::bench::run, argc, argv);
}
