// GlooWorkerTransport: the workers' exchanges and data phases as messages between Gloo's TCP
// pairs, each waited for against its step's deadline.
#include "cluster/gloo/gloo_worker_transport.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/unbound_buffer.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <deque>
#include <functional>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "base/host_name.h"
#include "base/mutex.h"
#include "base/wait.h"
#include "cluster/ring_all_reduce.h"
#include "device/kernels.h"
#include "distribute/check.h"
#include "distribute/errors.h"

namespace distribute::cluster::gloo_backend {
namespace {

// The slots of the transport's messages, apart from those of Gloo's own collectives (whose
// prefixes are small numbers in the top byte).
constexpr std::uint64_t slot_of(std::uint64_t kind) { return (std::uint64_t{0x40} + kind) << 56; }
constexpr std::uint64_t kHeaderSlot = slot_of(0);
constexpr std::uint64_t kInputSlot = slot_of(1);
constexpr std::uint64_t kGatherSlot = slot_of(3);
constexpr std::uint64_t kBroadcastSlot = slot_of(4);
// Exchanges of up to this size (a vote's header, a count, most descriptions) take a polled mesh.
constexpr std::size_t kPolledExchangeBytes = std::size_t{4} << 10;
// The ring's pieces (RingLinks::piece_bytes), each sent on as soon as it has come. Between 2 hosts
// at 10 Gbit/s (2-core harness) a sum of 16 MiB took a median 20.0 ms in 1 MiB pieces, 21.4 in
// 4 MiB and 21.0 step by step (6 launches each); in another round 19.8 in 1 MiB, 20.3 in 512 KiB
// and 21.0 in 2 MiB (5 each).
constexpr std::size_t kRingPiece = std::size_t{1} << 20;
// Up to this size an all_reduce takes one round of messages on a polled mesh, each worker's whole
// buffer to every other, instead of the ring's 2 (workers - 1): a small sum is latency alone.
constexpr std::size_t kDirectBytes = std::size_t{16} << 10;
// How long a farewell's write, and a transport's end, wait for the peers.
constexpr std::chrono::milliseconds kFarewellWait{200};

// What is left of `deadline`, as Gloo's waits take it (never its "unset", -1).
std::chrono::milliseconds remaining(detail::Deadline deadline) {
  if (deadline == detail::kNoDeadline) return std::chrono::hours(24 * 365);
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - detail::Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

// Gloo writes to its peers' sockets without MSG_NOSIGNAL, so a write to a peer that is gone
// would end this process with SIGPIPE where it should fail only the step with EPIPE. Ignored,
// unless the program handles the signal itself.
void ignore_sigpipe() {
  struct sigaction current {};
  sigaction(SIGPIPE, nullptr, &current);
  if (current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
}

// Whether two socket addresses name the same IP address and port.
bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

// This process's TCP socket from `local` to `remote`: a connected Gloo pair's. Gloo keeps a
// pair's socket to itself (and Debian's Gloo lacks a header that its TCP pair's declaration
// includes), but a connected pair reports its socket's local address, and its peer's pair the
// other end's.
int socket_between(const sockaddr_storage& local, const sockaddr_storage& remote, int peer) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &fd)) continue;
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0 || !same_endpoint(address, local)) {
      continue;
    }
    length = sizeof address;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0 && same_endpoint(address, remote)) {
      return fd;
    }
  }
  throw std::runtime_error(absl::StrCat("the socket of Gloo's pair with worker ", peer, " was not found"));
}

// The local address of a connected Gloo TCP pair's socket.
const sockaddr_storage& local_address(const ::gloo::transport::Pair& pair) {
  return dynamic_cast<const ::gloo::transport::tcp::Address&>(pair.address()).getSockaddr();
}

}  // namespace

// A full mesh of Gloo pairs (a context of its own) that the waiting thread reads itself
// (Pair::setSync): a message then costs one wake-up, of that thread, where Gloo's event thread
// costs a hand-over between two threads on each side, several times the latency on a busy or
// virtual machine (bench/gloo_pair_bench). Gloo bounds a synchronous read only by the fixed
// timeout its pair was connected with, so each wait here first polls the pair's socket against
// its own step's deadline, and lets Gloo read only once bytes (or the peer's end) have come.
// One thread at a time uses a mesh (its channel's lock): two readers of one socket could take
// each other's messages. The meshes are made in one order on every worker, each made synchronous
// as soon as it is connected; a worker sends a step's message on any of them only once it has
// connected the last, which its peers join only after they made the others synchronous, so that
// only a mesh's first messages (its sockets' addresses) may still reach a pair that Gloo's event
// thread reads, and Gloo's synchronous wait counts those.
class PolledMesh {
 public:
  PolledMesh(::gloo::rendezvous::Store& store, std::shared_ptr<::gloo::transport::Device> device, int rank,
             int workers, std::chrono::milliseconds timeout, std::size_t capacity)
      : context_(std::make_shared<::gloo::rendezvous::Context>(rank, workers)),
        capacity_(std::max(capacity, sizeof(sockaddr_storage))) {
    context_->setTimeout(timeout);
    context_->connectFullMesh(store, device);
    for (int w = 0; w < workers; ++w) {
      if (w == rank) continue;
      ::gloo::transport::Pair& pair = *context_->getPair(w);
      auto peer = std::make_unique<Peer>(w, capacity_);
      peer->receive = pair.createRecvBuffer(kSmallSlot, peer->in.data(), capacity_);
      peer->send = pair.createSendBuffer(kSmallSlot, peer->out.data(), capacity_);
      pair.setSync(true, false);
      peers_.push_back(std::move(peer));
    }
    // Each pair's first message is its socket's local address: the other end's peer address,
    // by which that end finds the socket to poll. These reads wait, as Gloo's do, up to `timeout`.
    for (auto& p : peers_) {
      const sockaddr_storage& mine = local_address(pair(*p));
      std::memcpy(p->out.data(), &mine, sizeof mine);
      p->send->send(0, sizeof mine);
      p->send->waitSend();
    }
    for (auto& p : peers_) {
      p->receive->waitRecv();
      sockaddr_storage theirs{};
      std::memcpy(&theirs, p->in.data(), sizeof theirs);
      // A descriptor of this mesh's own: Gloo closes its one when the pair fails, and the number
      // could then be another file's.
      p->socket = ::fcntl(socket_between(local_address(pair(*p)), theirs, p->rank), F_DUPFD_CLOEXEC, 0);
      if (p->socket < 0) throw std::runtime_error(absl::StrCat("fcntl: ", std::strerror(errno)));
    }
    wake_ = ::eventfd(0, EFD_CLOEXEC);
    if (wake_ < 0) throw std::runtime_error(absl::StrCat("eventfd: ", std::strerror(errno)));
  }

  ~PolledMesh() { ::close(wake_); }

  std::size_t capacity() const { return capacity_; }

  // Writes `bytes` (at most capacity()) to `peer` as its next message, on this thread, by
  // `deadline`. Throws what Gloo throws (the peer is gone, or the deadline passed).
  void send(int peer, std::span<const std::byte> bytes, detail::Deadline deadline) {
    Peer& p = at(peer);
    std::lock_guard lock(p.io);
    check_open(p);
    std::copy(bytes.begin(), bytes.end(), p.out.begin());
    gloo_call(p, SO_SNDTIMEO, deadline, [&] {
      p.send->send(0, bytes.size());
      p.send->waitSend();
    });
  }

  // The same for a large message, written from where it lies; its receiver takes it by `slot`
  // (receive_large).
  void send_large(int peer, int slot, const std::byte* bytes, std::size_t size, detail::Deadline deadline) {
    Peer& p = at(peer);
    std::lock_guard lock(p.io);
    check_open(p);
    gloo_call(p, SO_SNDTIMEO, deadline, [&] {
      auto buffer = pair(p).createSendBuffer(slot, const_cast<std::byte*>(bytes), size);
      buffer->send(0, size);
      buffer->waitSend();
    });
  }

  // Waits until `deadline` for `peer`'s next message, of out.size() bytes (every worker's message
  // of a step is of one size), and copies it to `out`. False when the deadline passed before any
  // of it came; throws what Gloo throws (the peer is gone, or the deadline passed while the rest
  // of the message was on its way), or when the mesh was abandoned meanwhile.
  bool receive(int peer, std::span<std::byte> out, detail::Deadline deadline) {
    Peer& p = at(peer);
    if (!wait_readable(p, deadline)) return false;
    std::lock_guard lock(p.io);
    check_open(p);
    gloo_call(p, SO_RCVTIMEO, deadline, [&] { p.receive->waitRecv(); });
    std::copy_n(p.in.begin(), std::min(out.size(), capacity_), out.begin());
    return true;
  }

  // The same for a large message sent by send_large on `slot`, read straight to `out`.
  bool receive_large(int peer, int slot, std::byte* out, std::size_t size, detail::Deadline deadline) {
    Peer& p = at(peer);
    std::unique_ptr<::gloo::transport::Buffer> buffer;
    {
      std::lock_guard lock(p.io);
      check_open(p);
      buffer = pair(p).createRecvBuffer(slot, out, size);
    }
    const bool ready = wait_readable(p, deadline);
    std::lock_guard lock(p.io);
    if (ready) {
      check_open(p);
      gloo_call(p, SO_RCVTIMEO, deadline, [&] { buffer->waitRecv(); });
    }
    buffer.reset();
    return ready;
  }

  // Ends every connection of the mesh at once, after a step's deadline passed: a wait of this
  // worker's on it ends, and its peers find the connections reset, so that no peer that comes
  // late takes a message this worker sent before it gave up for one of the step.
  void abandon() {
    std::unique_lock lock(state_);
    if (abandoned_) return;
    abandoned_ = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(wake_, &one, sizeof one);
    idle_.wait(lock, [&] { return polling_ == 0; });
    for (auto& p : peers_) ::shutdown(p->socket, SHUT_RDWR);  // a write blocked on it returns
    for (auto& p : peers_) {
      std::lock_guard io(p->io);
      if (!p->failed) pair(*p).close();
      // The last descriptor closes with no linger: the connection is reset.
      const linger reset{1, 0};
      ::setsockopt(p->socket, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
      ::close(p->socket);
      p->socket = -1;
      p->failed = true;
    }
  }

  // Ends the connection with `peer` both ways at once, after a step failed: a write of this
  // worker's blocked on it returns, and the peer finds this worker gone.
  void interrupt(int peer) {
    std::lock_guard lock(state_);
    if (!abandoned_) ::shutdown(at(peer).socket, SHUT_RDWR);
  }

  // Ends the mesh in order: each peer gets the end of this worker's messages (after any farewell),
  // and what it sent is read until it ends its own, or until `deadline`: a socket closed with
  // bytes unread resets the connection, and the peer would lose what it has not read yet.
  void close(detail::Deadline deadline) {
    std::vector<std::byte> discard(4096);
    for (auto& p : peers_) {
      std::lock_guard lock(p->io);
      if (p->socket < 0) continue;
      ::shutdown(p->socket, SHUT_WR);
      while (readable(p->socket, deadline) && ::recv(p->socket, discard.data(), discard.size(), 0) > 0) {
      }
    }
  }

 private:
  // The slot of messages up to capacity(), in buffers of the mesh's; large ones take others.
  static constexpr int kSmallSlot = 0;

  struct Peer {
    Peer(int worker, std::size_t capacity) : rank(worker), in(capacity), out(capacity) {}
    ~Peer() {
      if (socket >= 0) ::close(socket);
    }
    const int rank;
    int socket = -1;
    std::vector<std::byte> in;
    std::vector<std::byte> out;
    std::unique_ptr<::gloo::transport::Buffer> receive;
    std::unique_ptr<::gloo::transport::Buffer> send;
    std::mutex io;  // held in Gloo's reads and writes on this pair, never while polling
    // Gloo failed the pair (and closed its descriptor), or the mesh was abandoned. Under io.
    bool failed = false;
  };

  Peer& at(int peer) { return *peers_[static_cast<std::size_t>(peer < context_->rank ? peer : peer - 1)]; }
  ::gloo::transport::Pair& pair(const Peer& p) { return *context_->getPair(p.rank); }

  // Under p.io.
  void check_open(const Peer& p) const {
    if (abandoned_) throw std::runtime_error("the connections were reset after a step's deadline passed");
    if (p.failed) throw std::runtime_error(absl::StrCat("the connection to worker ", p.rank, " failed before"));
  }

  // A read or write of Gloo's on p's socket, under p.io, ended by `deadline` (the socket's
  // `option`, SO_RCVTIMEO or SO_SNDTIMEO, tells Gloo's blocking call when to give up).
  template <typename Call>
  void gloo_call(Peer& p, int option, detail::Deadline deadline, Call call) {
    timeval limit{};  // zero: none
    if (deadline != detail::kNoDeadline) {
      const auto left = std::max<detail::Clock::duration>(deadline - detail::Clock::now(), std::chrono::microseconds(1));
      const auto micros = std::chrono::ceil<std::chrono::microseconds>(left).count();
      limit.tv_sec = static_cast<time_t>(micros / 1000000);
      limit.tv_usec = static_cast<suseconds_t>(micros % 1000000);
    }
    try {
      if (::setsockopt(p.socket, SOL_SOCKET, option, &limit, sizeof limit) != 0) {
        throw std::runtime_error(absl::StrCat("setsockopt: ", std::strerror(errno)));
      }
      call();
    } catch (...) {
      p.failed = true;
      throw;
    }
  }

  // Polls p's socket (readable()) unless the mesh is abandoned, counted in polling_ meanwhile.
  bool wait_readable(Peer& p, detail::Deadline deadline) {
    {
      std::lock_guard lock(state_);
      if (abandoned_) throw std::runtime_error("the connections were reset after a step's deadline passed");
      ++polling_;
    }
    const auto done = [&] {
      std::lock_guard lock(state_);
      if (--polling_ == 0) idle_.notify_all();
    };
    try {
      const bool ready = readable(p.socket, deadline);
      done();
      return ready;
    } catch (...) {
      done();
      throw;
    }
  }

  // Whether `socket` has bytes to read (or its end, or an error, which Gloo's read then reports)
  // before `deadline`, or the mesh is being abandoned. It polls, yielding the core between polls,
  // for as long as the MPI backend's waits do (detail::PollPacer), so that a message that comes
  // within that costs no wake-up; a longer wait sleeps in poll().
  bool readable(int socket, detail::Deadline deadline) const {
    pollfd wanted[2] = {{socket, POLLIN, 0}, {wake_, POLLIN, 0}};
    const detail::Deadline yield_until = std::min(deadline, detail::Clock::now() + detail::PollPacer::kYieldFor);
    do {
      const int ready = ::poll(wanted, 2, 0);
      if (ready > 0) return true;
      if (ready < 0 && errno != EINTR) throw std::runtime_error(absl::StrCat("poll: ", std::strerror(errno)));
      detail::yield_core();
    } while (detail::Clock::now() < yield_until);
    for (;;) {
      const auto wait = deadline == detail::kNoDeadline ? -1 : static_cast<int>(std::min<std::int64_t>(
                                                                   remaining(deadline).count(), 1 << 30));
      const int ready = ::poll(wanted, 2, wait);
      if (ready > 0) return true;
      if (ready == 0 && detail::Clock::now() >= deadline) return false;
      if (ready < 0 && errno != EINTR) throw std::runtime_error(absl::StrCat("poll: ", std::strerror(errno)));
    }
  }

  std::shared_ptr<::gloo::rendezvous::Context> context_;
  const std::size_t capacity_;
  int wake_ = -1;  // readable once the mesh is abandoned
  std::mutex state_;
  std::condition_variable idle_;
  int polling_ = 0;  // threads in readable(), under state_
  std::atomic<bool> abandoned_{false};
  std::vector<std::unique_ptr<Peer>> peers_;  // every worker's but this one's, in worker order
};

// The thread that writes the ring's messages, in the order they were queued, while the calling
// thread reads, for as long as the transport lives.
class RingWriter {
 public:
  RingWriter() : thread_([this] { loop(); }) {}
  ~RingWriter() {
    {
      detail::MutexLock lock(mu_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  RingWriter(const RingWriter&) = delete;
  RingWriter& operator=(const RingWriter&) = delete;

  // Runs `write` on the thread after those queued before.
  std::future<void> run(std::function<void()> write) {
    std::packaged_task<void()> task(std::move(write));
    std::future<void> done = task.get_future();
    {
      detail::MutexLock lock(mu_);
      queue_.push_back(std::move(task));
    }
    changed_.notify_all();
    return done;
  }

 private:
  void loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        detail::MutexLock lock(mu_);
        while (queue_.empty() && !stopping_) changed_.wait(mu_);
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  detail::Mutex mu_;
  std::condition_variable_any changed_;
  std::deque<std::packaged_task<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it starts once the rest is made
};

// The outcome of a step's transfers: the peers whose bytes had not come, those that had not taken
// this worker's, and what failed first (Gloo's words, or the deadline's passing).
struct TransferResult {
  std::vector<int> missing;
  std::vector<int> unsent;
  std::string error;
  // A wait ran out of time (then Gloo has failed every pair of its context).
  bool timed_out = false;
  bool failed() const { return !error.empty(); }
  void add_missing(int peer, std::string what, bool deadline_passed) {
    if (!failed()) error = std::move(what);
    timed_out = timed_out || deadline_passed;
    if (std::find(missing.begin(), missing.end(), peer) == missing.end()) missing.push_back(peer);
  }
};

namespace {

// One transfer of a step: bytes to or from one peer.
struct Transfer {
  int peer;
  std::byte* bytes;
  std::size_t size;
};

// What failed in a data phase, for its report: the peers that did not answer, on their hosts, and
// what failed first.
std::string describe_failure(const TransferResult& result, const std::vector<std::string>& hosts) {
  std::string text;
  const auto name = [&](const std::vector<int>& workers, const char* what) {
    if (workers.empty()) return;
    std::vector<std::string> peers;
    for (int w : workers) peers.push_back(absl::StrCat(w, " on ", hosts[static_cast<std::size_t>(w)]));
    absl::StrAppend(&text, workers.size() == 1 ? "worker " : "workers ", absl::StrJoin(peers, ", "), what);
  };
  name(result.missing, " did not answer; ");
  name(result.unsent, " did not take this worker's bytes; ");
  return text + result.error;
}

std::string gloo_error(const std::exception& e) { return absl::StrCat("Gloo: ", e.what()); }

// Posts every send and receive of a step on `slot`, then waits for each until `deadline`. A peer
// that is gone fails only its own transfers, and the others' go on, so that every peer that did
// not answer, and only those, is named; a wait that times out fails the whole context (Gloo's
// rule), after which the waits left end at once unless their transfer is already done.
TransferResult transfer(::gloo::Context& context, std::span<const Transfer> sends, std::span<const Transfer> receives,
                        std::uint64_t slot, detail::Deadline deadline) {
  TransferResult result;
  // A peer already gone fails its own transfers at once; the others still go.
  const auto failed = [&](int peer, const std::exception& e) {
    result.add_missing(peer, gloo_error(e), detail::Clock::now() >= deadline);
  };
  std::vector<std::pair<int, std::unique_ptr<::gloo::transport::UnboundBuffer>>> posted_receives;
  std::vector<std::pair<int, std::unique_ptr<::gloo::transport::UnboundBuffer>>> posted_sends;
  for (const Transfer& r : receives) {
    if (r.size == 0) continue;
    try {
      auto buffer = context.createUnboundBuffer(r.bytes, r.size);
      buffer->recv(r.peer, slot);
      posted_receives.emplace_back(r.peer, std::move(buffer));
    } catch (const std::exception& e) {
      failed(r.peer, e);
    }
  }
  for (const Transfer& s : sends) {
    if (s.size == 0) continue;
    try {
      auto buffer = context.createUnboundBuffer(s.bytes, s.size);
      buffer->send(s.peer, slot);
      posted_sends.emplace_back(s.peer, std::move(buffer));
    } catch (const std::exception& e) {
      failed(s.peer, e);
    }
  }
  for (auto& [peer, buffer] : posted_receives) {
    try {
      buffer->waitRecv(remaining(deadline));
    } catch (const std::exception& e) {
      failed(peer, e);
    }
  }
  std::sort(result.missing.begin(), result.missing.end());
  // A peer whose bytes came but that did not take this worker's fails the step without being
  // missing from it.
  for (auto& [peer, buffer] : posted_sends) {
    try {
      buffer->waitSend(remaining(deadline));
    } catch (const std::exception& e) {
      if (!result.failed()) result.error = gloo_error(e);
      result.timed_out = result.timed_out || detail::Clock::now() >= deadline;
      if (!std::binary_search(result.missing.begin(), result.missing.end(), peer) &&
          std::find(result.unsent.begin(), result.unsent.end(), peer) == result.unsent.end()) {
        result.unsent.push_back(peer);
      }
    }
  }
  return result;
}

// The same on a polled mesh, whose messages hold at most its capacity: every send is written
// first, then each peer's message is waited for until `deadline`, and once a wait has run out,
// only what has already come is taken.
TransferResult transfer(PolledMesh& mesh, std::span<const Transfer> sends, std::span<const Transfer> receives,
                        detail::Deadline deadline) {
  TransferResult result;
  const auto failed = [&](int peer, const std::exception& e) {
    result.add_missing(peer, gloo_error(e), detail::Clock::now() >= deadline);
  };
  for (const Transfer& s : sends) {
    if (s.size == 0) continue;
    try {
      mesh.send(s.peer, std::span<const std::byte>(s.bytes, s.size), deadline);
    } catch (const std::exception& e) {
      failed(s.peer, e);
    }
  }
  for (const Transfer& r : receives) {
    if (r.size == 0 || std::find(result.missing.begin(), result.missing.end(), r.peer) != result.missing.end()) {
      continue;
    }
    try {
      if (!mesh.receive(r.peer, std::span<std::byte>(r.bytes, r.size),
                        result.timed_out ? detail::Clock::now() : deadline)) {
        result.add_missing(r.peer, "the step's deadline passed first", true);
      }
    } catch (const std::exception& e) {
      failed(r.peer, e);
    }
  }
  std::sort(result.missing.begin(), result.missing.end());
  return result;
}

}  // namespace

// A farewell's bytes and its sends, which nobody waits for until the transport goes: a buffer
// for each peer, since a send that fails (to a peer that left first) fails every later wait on
// its buffer, and must not keep the others from being waited for.
GlooWorkerTransport::GlooWorkerTransport(::gloo::rendezvous::Store& store, GlooTransportOptions options)
    : options_(std::move(options)), headers_{kHeaderSlot, nullptr, {}}, input_{kInputSlot, nullptr, {}} {
  const int workers = options_.workers;
  const int rank = options_.rank;
  DISTRIBUTE_CHECK(workers >= 1 && rank >= 0 && rank < workers, InvalidArgumentError,
                   "GlooWorkerTransport: rank ", rank, " of ", workers, " workers; a rank is 0 to workers - 1");
  ignore_sigpipe();
  ::gloo::rendezvous::PrefixStore group(options_.prefix, store);
  // Every worker first says it arrived, then waits for the others one by one, so that a timeout
  // names who is missing (Gloo's own connection would only time out).
  const auto arrived_key = [](int w) { return absl::StrCat("arrived/", w); };
  const detail::Deadline deadline = detail::Clock::now() + options_.connect_timeout;
  std::vector<int> missing;
  const auto holds = [&](const std::string& key) { return store_holds(store, options_.prefix + "/" + key); };
  const auto taken = [&] {
    return FailedPreconditionError(absl::StrCat(
        "GlooWorkerTransport: the rendezvous store already holds worker ", rank, "'s keys under \"", options_.prefix,
        "\": two processes of this job were given the same rank, or another run of this job (or a job of the same "
        "id) left them; give each process its own rank, and each run its own job id (GlooOptions::job_id, "
        "DISTRIBUTE_JOB_ID) or a fresh store"));
  };
  try {
    if (holds(arrived_key(rank))) throw taken();
    try {
      group.set(arrived_key(rank), std::vector<char>{'1'});
    } catch (const ::gloo::Exception&) {
      if (holds(arrived_key(rank))) throw taken();  // set between the check and the set
      throw;
    }
    for (int w = 0; w < workers; ++w) {
      if (w == rank) continue;
      while (!holds(arrived_key(w))) {
        if (detail::Clock::now() >= deadline) {
          missing.push_back(w);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  } catch (const FailedPreconditionError&) {
    throw;
  } catch (const std::exception& e) {
    throw UnavailableError(absl::StrCat("GlooWorkerTransport: worker ", rank, " cannot reach the rendezvous store: ",
                                        e.what()));
  }
  DISTRIBUTE_CHECK(missing.empty(), DeadlineExceededError, "GlooWorkerTransport: worker ", rank, " waited ",
                   options_.connect_timeout.count(), " ms at the rendezvous store for workers ",
                   absl::StrJoin(missing, ", "), " of ", workers, ", which did not arrive");
  try {
    ::gloo::transport::tcp::attr attr;
    if (!options_.hostname.empty()) {
      attr.hostname = options_.hostname;
    } else if (!options_.interface.empty()) {
      attr.iface = options_.interface;
    } else {
      attr.hostname = detail::host_name();
    }
    std::shared_ptr<::gloo::transport::Device> device = ::gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<::gloo::rendezvous::Context>(rank, workers);
    // Every worker has arrived: the connections get a whole timeout of their own, however late
    // the last worker came.
    context_->setTimeout(options_.connect_timeout);
    context_->connectFullMesh(group, device);
    // The meshes that small messages take, each a context of its own (PolledMesh), in this order
    // on every worker.
    ::gloo::rendezvous::PrefixStore headers_store("polled/headers", group);
    headers_.polled = std::make_unique<PolledMesh>(headers_store, device, rank, workers, options_.connect_timeout,
                                                   kPolledExchangeBytes);
    ::gloo::rendezvous::PrefixStore input_store("polled/input", group);
    input_.polled = std::make_unique<PolledMesh>(input_store, device, rank, workers, options_.connect_timeout,
                                                 kPolledExchangeBytes);
    ::gloo::rendezvous::PrefixStore direct_store("polled/direct", group);
    direct_ = std::make_unique<PolledMesh>(direct_store, device, rank, workers, options_.connect_timeout, kDirectBytes);
    // The ring's: each of its connections carries bytes one way, so that a worker's write to its
    // next and read from its previous never wait for each other (a synchronous pair reads and
    // writes under one lock), even between two workers.
    ::gloo::rendezvous::PrefixStore up_store("polled/ring_up", group);
    ring_up_ = std::make_unique<PolledMesh>(up_store, device, rank, workers, options_.connect_timeout, 0);
    ::gloo::rendezvous::PrefixStore down_store("polled/ring_down", group);
    ring_down_ = std::make_unique<PolledMesh>(down_store, device, rank, workers, options_.connect_timeout, 0);
    ring_writer_ = std::make_unique<RingWriter>();
  } catch (const std::exception& e) {
    throw UnavailableError(absl::StrCat("GlooWorkerTransport: worker ", rank, " could not connect to the other ",
                                        workers - 1, " workers: ", e.what()));
  }
  // Each worker's host name, so that the workers know which of them share a machine.
  constexpr std::size_t kHostBytes = 256;
  std::vector<char> mine(kHostBytes, '\0');
  detail::host_name().copy(mine.data(), kHostBytes - 1);
  std::vector<char> all(kHostBytes * static_cast<std::size_t>(workers));
  missing = exchange(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all)),
                     detail::Clock::now() + options_.connect_timeout);
  DISTRIBUTE_CHECK(missing.empty(), DeadlineExceededError, "GlooWorkerTransport: worker ", rank,
                   " connected, but workers ", absl::StrJoin(missing, ", "), " did not say their host in time");
  for (int w = 0; w < workers; ++w) hosts_.emplace_back(all.data() + static_cast<std::size_t>(w) * kHostBytes);
  on_host_ = static_cast<int>(std::count(hosts_.begin(), hosts_.end(), hosts_[static_cast<std::size_t>(rank)]));
}

GlooWorkerTransport::~GlooWorkerTransport() {
  // Each peer's connections end in order (after this worker's farewell, if it sent one), waited
  // for a short while: a peer that leaves too ends its own at once, and one still waiting in an
  // exchange has taken the farewell.
  const detail::Deadline deadline = detail::Clock::now() + kFarewellWait;
  for (PolledMesh* mesh : polled_meshes()) {
    if (mesh != nullptr) mesh->close(deadline);
  }
}

void GlooWorkerTransport::fail_connections() {
  for (PolledMesh* mesh : polled_meshes()) mesh->abandon();
  // Gloo fails every pair of its context when a wait on it times out; one that cannot be met
  // (nothing is posted) does so at once.
  try {
    context_->createUnboundBuffer(nullptr, 0)->waitRecv(std::chrono::milliseconds(0));
  } catch (const std::exception&) {
    // The failure intended.
  }
}

void GlooWorkerTransport::check_usable() const {
  std::lock_guard lock(broken_mutex_);
  DISTRIBUTE_CHECK(!broken_by_.has_value(), UnavailableError, "GlooWorkerTransport: the connections between the "
                   "workers broke at ", *broken_by_, "; this transport can carry nothing more");
}

std::vector<int> GlooWorkerTransport::exchange_on(ExchangeChannel& channel, std::span<const std::byte> mine,
                                                  std::span<std::byte> all, detail::Deadline deadline) {
  check_usable();
  std::lock_guard lock(channel.mutex);
  const std::size_t size = mine.size();
  const auto me = static_cast<std::size_t>(options_.rank);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(me * size));
  std::vector<Transfer> sends;
  std::vector<Transfer> receives;
  for (int w = 0; w < options_.workers; ++w) {
    if (w == options_.rank) continue;
    sends.push_back({w, all.data() + me * size, size});
    receives.push_back({w, all.data() + static_cast<std::size_t>(w) * size, size});
  }
  TransferResult result = size <= channel.polled->capacity()
                              ? transfer(*channel.polled, sends, receives, deadline)
                              : transfer(*context_, sends, receives, channel.slot, deadline);
  if (result.failed()) {
    {
      std::lock_guard broken(broken_mutex_);
      if (!broken_by_) broken_by_ = absl::StrCat("an exchange of the workers' agreement (", result.error, ")");
    }
    if (result.timed_out) fail_connections();
  }
  return result.missing;
}

std::vector<int> GlooWorkerTransport::exchange(std::span<const std::byte> mine, std::span<std::byte> all,
                                               detail::Deadline deadline) {
  return exchange_on(headers_, mine, all, deadline);
}

std::vector<int> GlooWorkerTransport::exchange_input(std::span<const std::byte> mine, std::span<std::byte> all,
                                                     detail::Deadline deadline) {
  return exchange_on(input_, mine, all, deadline);
}

void GlooWorkerTransport::send_farewell(std::span<const std::byte> mine) {
  check_usable();
  std::lock_guard order(headers_.mutex);
  DISTRIBUTE_CHECK(mine.size() <= headers_.polled->capacity(), InvalidArgumentError,
                   "GlooWorkerTransport::send_farewell: ", mine.size(), " bytes; a farewell holds at most ",
                   headers_.polled->capacity());
  if (mine.empty()) return;
  for (int w = 0; w < options_.workers; ++w) {
    if (w == options_.rank) continue;
    try {
      headers_.polled->send(w, mine, detail::Clock::now() + kFarewellWait);
    } catch (const std::exception&) {
      // This peer is gone already.
    }
  }
}

// A worker gives up when a deadline passes, which over Gloo has already failed every connection:
// no note can reach the others, whose own waits for it end at their deadlines.
void GlooWorkerTransport::send_gave_up(const StepName&) {}

std::vector<std::pair<int, std::string>> GlooWorkerTransport::take_gave_up() { return {}; }

void GlooWorkerTransport::data_phase_failed(const StepName& what, const TransferResult& failure) {
  {
    std::lock_guard lock(broken_mutex_);
    if (!broken_by_) broken_by_ = what.str();
  }
  if (failure.timed_out) fail_connections();
  const std::string report = absl::StrCat("worker ", options_.rank, ": the data phase of ", what.str(),
                                          " failed between the workers (", describe_failure(failure, hosts_), ")");
  if (options_.on_stall == OnStall::kFailStrategy) {
    throw DeadlineExceededError(absl::StrCat(report, "; the strategy is unusable and the job goes on "
                                                     "(StalledCollectiveAction::kFailStrategy)"));
  }
  std::fprintf(stderr, "distribute: %s; ending this worker, whose peers then fail as they find it gone\n",
               report.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// The ring's links: messages to the next worker, written by the transport's RingWriter, and from
// the previous one, read by the calling thread; each straight from or to the caller's buffers. The
// k-th message of a sum goes on slot k, which tells the reader's pair the buffer it fills.
class GlooWorkerTransport::RingLinks final : public cluster::RingLinks {
 public:
  RingLinks(GlooWorkerTransport& transport, detail::Deadline deadline)
      : transport_(transport),
        deadline_(deadline),
        next_((rank() + 1) % size()),
        previous_((rank() + size() - 1) % size()),
        out_(next_ > rank() ? *transport.ring_up_ : *transport.ring_down_),
        in_(previous_ < rank() ? *transport.ring_up_ : *transport.ring_down_) {}
  // No write outlives the sum whose buffers it reads.
  ~RingLinks() override {
    if (sends_.empty()) return;
    out_.interrupt(next_);
    for (std::future<void>& sent : sends_) sent.wait();
  }
  RingLinks(const RingLinks&) = delete;
  RingLinks& operator=(const RingLinks&) = delete;

  int rank() const override { return transport_.options_.rank; }
  int size() const override { return transport_.options_.workers; }
  std::size_t piece_bytes() const override { return kRingPiece; }

  void send_next(std::span<const std::byte> bytes) override {
    const int slot = ++queued_;
    sends_.push_back(transport_.ring_writer_->run(
        [this, bytes, slot] { out_.send_large(next_, slot, bytes.data(), bytes.size(), deadline_); }));
  }

  void receive_previous(std::span<std::byte> into) override {
    const int slot = ++received_;
    take_finished_sends();
    if (!failure.failed()) {
      try {
        if (!in_.receive_large(previous_, slot, into.data(), into.size(), deadline_)) {
          failure.add_missing(previous_, "the step's deadline passed first", true);
        }
      } catch (const std::exception& e) {
        failure.add_missing(previous_, gloo_error(e), detail::Clock::now() >= deadline_);
      }
    }
    if (failure.failed()) fail();
  }

  void flush() override {
    // A write still blocked at the deadline (a blocked write waits the socket's timeout again after
    // each part it wrote) is ended.
    while (!sends_.empty()) {
      if (deadline_ != detail::kNoDeadline && sends_.front().wait_until(deadline_) == std::future_status::timeout) {
        out_.interrupt(next_);
      }
      take_send();
    }
    if (failure.failed()) fail();
  }

  void send_next_receive_previous(std::span<const std::byte> to_next, std::span<std::byte> from_previous) override {
    for (std::size_t at = 0; at < to_next.size(); at += kRingPiece) {
      send_next(to_next.subspan(at, std::min(kRingPiece, to_next.size() - at)));
    }
    for (std::size_t at = 0; at < from_previous.size(); at += kRingPiece) {
      receive_previous(from_previous.subspan(at, std::min(kRingPiece, from_previous.size() - at)));
    }
    flush();
  }

  // The sum's transfers, failed or not.
  TransferResult failure;

 private:
  // Waits for the oldest queued write; its failure fails the sum.
  void take_send() {
    try {
      sends_.front().get();
    } catch (const std::exception& e) {
      if (!failure.failed()) failure.error = gloo_error(e);
      failure.timed_out = failure.timed_out || detail::Clock::now() >= deadline_;
      if (!send_failed_ && (next_ != previous_ || failure.missing.empty())) failure.unsent.push_back(next_);
      send_failed_ = true;
    }
    sends_.pop_front();
  }

  // Takes the writes already done, so that one that failed fails the sum before this worker waits
  // on its previous for bytes that may never come.
  void take_finished_sends() {
    while (!sends_.empty() && sends_.front().wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      take_send();
    }
  }

  // Ends the writes still queued or blocked (they would wait for a peer that the sum gave up on),
  // then throws.
  [[noreturn]] void fail() {
    if (!sends_.empty()) out_.interrupt(next_);
    while (!sends_.empty()) take_send();
    throw std::runtime_error(failure.error);
  }

  GlooWorkerTransport& transport_;
  const detail::Deadline deadline_;
  const int next_;
  const int previous_;
  PolledMesh& out_;
  PolledMesh& in_;
  std::deque<std::future<void>> sends_;  // the queued writes, oldest first
  int queued_ = 0;
  int received_ = 0;
  bool send_failed_ = false;
};

int GlooWorkerTransport::all_reduce(DType dtype, void* data, std::int64_t count, Compression compression,
                                    detail::Deadline deadline, const StepName& what) {
  check_usable();
  std::lock_guard lock(data_mutex_);
  if (options_.workers == 1 || count == 0) return -1;
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  if (compression == Compression::kNone && bytes <= direct_->capacity()) {
    all_reduce_direct(dtype, static_cast<std::byte*>(data), count, deadline, what);
    return -1;
  }
  RingLinks links(*this, deadline);
  try {
    if (compression != Compression::kNone) {
      return ring_all_reduce_compressed(links, compression, static_cast<float*>(data), count, ring_scratch_);
    }
    ring_all_reduce(links, dtype, static_cast<std::byte*>(data), count, ring_scratch_);
    return -1;
  } catch (const std::runtime_error& e) {
    if (!links.failure.failed()) throw;
    data_phase_failed(what, links.failure);
  }
}

void GlooWorkerTransport::all_reduce_direct(DType dtype, std::byte* data, std::int64_t count,
                                            detail::Deadline deadline, const StepName& what) {
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  const auto workers = static_cast<std::size_t>(options_.workers);
  const auto me = static_cast<std::size_t>(options_.rank);
  direct_scratch_.resize(bytes * workers);
  std::byte* all = direct_scratch_.data();
  std::memcpy(all + me * bytes, data, bytes);
  std::vector<Transfer> sends;
  std::vector<Transfer> receives;
  for (int w = 0; w < options_.workers; ++w) {
    if (w == options_.rank) continue;
    sends.push_back({w, all + me * bytes, bytes});
    receives.push_back({w, all + static_cast<std::size_t>(w) * bytes, bytes});
  }
  TransferResult result = transfer(*direct_, sends, receives, deadline);
  if (result.failed()) data_phase_failed(what, result);
  // Every worker adds the same buffers in worker order: the same bits everywhere.
  std::vector<const void*> inputs;
  for (std::size_t w = 0; w < workers; ++w) inputs.push_back(all + w * bytes);
  detail::reduce_buffers(dtype, ReduceOp::kSum, inputs, data, count, 1);
}

void GlooWorkerTransport::all_gather(const void* mine, std::span<const std::size_t> sizes, void* out,
                                     detail::Deadline deadline, const StepName& what) {
  check_usable();
  std::lock_guard lock(data_mutex_);
  auto* bytes = static_cast<std::byte*>(out);
  std::vector<std::size_t> offsets(sizes.size() + 1, 0);
  for (std::size_t w = 0; w < sizes.size(); ++w) offsets[w + 1] = offsets[w] + sizes[w];
  const auto me = static_cast<std::size_t>(options_.rank);
  std::memcpy(bytes + offsets[me], mine, sizes[me]);
  std::vector<Transfer> sends;
  std::vector<Transfer> receives;
  for (int w = 0; w < options_.workers; ++w) {
    if (w == options_.rank) continue;
    const auto u = static_cast<std::size_t>(w);
    sends.push_back({w, bytes + offsets[me], sizes[me]});
    receives.push_back({w, bytes + offsets[u], sizes[u]});
  }
  TransferResult result = transfer(*context_, sends, receives, kGatherSlot, deadline);
  if (result.failed()) data_phase_failed(what, result);
}

void GlooWorkerTransport::broadcast(void* data, std::size_t bytes, int root, detail::Deadline deadline,
                                    const StepName& what) {
  check_usable();
  std::lock_guard lock(data_mutex_);
  std::vector<Transfer> sends;
  std::vector<Transfer> receives;
  if (options_.rank == root) {
    for (int w = 0; w < options_.workers; ++w) {
      if (w != root) sends.push_back({w, static_cast<std::byte*>(data), bytes});
    }
  } else {
    receives.push_back({root, static_cast<std::byte*>(data), bytes});
  }
  TransferResult result = transfer(*context_, sends, receives, kBroadcastSlot, deadline);
  if (result.failed()) data_phase_failed(what, result);
}

}  // namespace distribute::cluster::gloo_backend
