// GlooWorkerTransport: the workers' exchanges and data phases as messages between Gloo's TCP
// pairs, each waited for against its step's deadline.
#include "cluster/gloo/gloo_worker_transport.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/host_name.h"
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
constexpr std::uint64_t kRingSlot = slot_of(2);
constexpr std::uint64_t kGatherSlot = slot_of(3);
constexpr std::uint64_t kBroadcastSlot = slot_of(4);
constexpr std::uint64_t kDirectSlot = slot_of(5);
constexpr std::uint64_t kHeaderPostedSlot = slot_of(6);
constexpr std::uint64_t kInputPostedSlot = slot_of(7);
// Exchanges of up to this size (a vote's header, a count) take the receives posted ahead.
constexpr std::size_t kPostedExchangeBytes = 256;
// The largest message of a ring step.
constexpr std::size_t kRingPiece = std::size_t{1} << 20;
// Up to this size an all_reduce takes one round of messages, each worker's whole buffer to every
// other, instead of the ring's 2 (workers - 1): over Gloo each message costs a wake-up of each
// side's threads, tens of microseconds, where a small sum is latency alone.
constexpr std::size_t kDirectBytes = std::size_t{16} << 10;

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

}  // namespace

// Each peer's next message on one slot, received into a buffer of this transport's: posted one
// exchange ahead, so that the peer's send finds it and goes at once. A receive posted only when
// its exchange begins first sends the peer a notice, and the peer sends nothing until it comes:
// a round trip more, with a wake-up of both sides' threads, for every message.
class PostedReceives {
 public:
  PostedReceives(::gloo::Context& context, std::uint64_t slot, std::size_t capacity)
      : context_(context), slot_(slot), capacity_(capacity) {
    for (int w = 0; w < context.size; ++w) {
      if (w == context.rank) continue;
      peers_.push_back(Peer{w, std::vector<std::byte>(capacity), nullptr, {}});
      post(peers_.back());
    }
  }

  // Gloo cannot withdraw a posted receive, and its event thread completes or fails one (when a
  // peer goes) while it likes: a buffer freed with its receive pending may be written after.
  // Failing the connections ends every such receive first (a wait that times out fails every
  // pair of the context, and Gloo then forgets the pairs' receives). Called as the transport
  // goes, once its last messages have been written.
  ~PostedReceives() {
    for (Peer& p : peers_) {
      if (!p.buffer) continue;
      try {
        p.buffer->waitRecv(std::chrono::milliseconds(0));
      } catch (const std::exception&) {
        // The connections are failed, as intended.
      }
    }
  }

  std::uint64_t slot() const { return slot_; }
  std::size_t capacity() const { return capacity_; }

  // Waits until `deadline` for `peer`'s next message, of `size` bytes (every worker's exchange
  // is of one size), copies it to `out`, then posts the receive of the one after. Throws what
  // Gloo throws.
  void take(int peer, std::byte* out, std::size_t size, detail::Deadline deadline) {
    Peer& p = peers_[static_cast<std::size_t>(peer < context_.rank ? peer : peer - 1)];
    if (!p.buffer) throw std::runtime_error(p.post_error);
    p.buffer->waitRecv(remaining(deadline));
    std::memcpy(out, p.bytes.data(), std::min(size, capacity_));
    post(p);
  }

 private:
  struct Peer {
    int rank;
    std::vector<std::byte> bytes;
    std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
    std::string post_error;  // why no receive is posted, when none is
  };
  void post(Peer& peer) {
    peer.buffer.reset();
    try {
      auto buffer = context_.createUnboundBuffer(peer.bytes.data(), capacity_);
      buffer->recv(peer.rank, slot_);
      peer.buffer = std::move(buffer);
    } catch (const std::exception& e) {
      peer.post_error = e.what();
    }
  }

  ::gloo::Context& context_;
  const std::uint64_t slot_;
  const std::size_t capacity_;
  std::vector<Peer> peers_;  // every worker's but this one's, in worker order
};

namespace {

// One transfer of a step: bytes to or from one peer.
struct Transfer {
  int peer;
  std::byte* bytes;
  std::size_t size;
};

// The outcome of a step's transfers: the peers whose bytes had not come, those that had not taken
// this worker's, and Gloo's first error.
struct TransferResult {
  std::vector<int> missing;
  std::vector<int> unsent;
  std::string error;
  bool failed() const { return !error.empty(); }
};

// What failed in a data phase, for its report: the peers that did not answer, on their hosts, and
// Gloo's words.
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
  return absl::StrCat(text, "Gloo: ", result.error);
}

// Posts every send and receive of a step on `slot`, then waits for each until `deadline`. A peer
// that is gone fails only its own transfers, and the others' go on, so that every peer that did
// not answer, and only those, is named; a wait that times out fails the whole context (Gloo's
// rule), after which the waits left end at once unless their transfer is already done. With
// `posted`, the sends go to its slot and the receives are its own, posted ahead.
TransferResult transfer(::gloo::Context& context, std::span<const Transfer> sends, std::span<const Transfer> receives,
                        std::uint64_t slot, detail::Deadline deadline, PostedReceives* posted = nullptr) {
  TransferResult result;
  // A peer already gone fails its own transfers at once; the others still go.
  const auto failed = [&](int peer, const std::exception& e) {
    if (!result.failed()) result.error = e.what();
    if (std::find(result.missing.begin(), result.missing.end(), peer) == result.missing.end()) {
      result.missing.push_back(peer);
    }
  };
  std::vector<std::pair<int, std::unique_ptr<::gloo::transport::UnboundBuffer>>> posted_receives;
  std::vector<std::pair<int, std::unique_ptr<::gloo::transport::UnboundBuffer>>> posted_sends;
  for (const Transfer& r : receives) {
    if (r.size == 0 || posted != nullptr) continue;
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
      buffer->send(s.peer, posted != nullptr ? posted->slot() : slot);
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
  if (posted != nullptr) {
    for (const Transfer& r : receives) {
      if (r.size == 0) continue;
      try {
        posted->take(r.peer, r.bytes, r.size, deadline);
      } catch (const std::exception& e) {
        failed(r.peer, e);
      }
    }
  }
  std::sort(result.missing.begin(), result.missing.end());
  // A peer whose bytes came but that did not take this worker's fails the step without being
  // missing from it.
  for (auto& [peer, buffer] : posted_sends) {
    try {
      buffer->waitSend(remaining(deadline));
    } catch (const std::exception& e) {
      if (!result.failed()) result.error = e.what();
      if (!std::binary_search(result.missing.begin(), result.missing.end(), peer) &&
          std::find(result.unsent.begin(), result.unsent.end(), peer) == result.unsent.end()) {
        result.unsent.push_back(peer);
      }
    }
  }
  return result;
}

}  // namespace

// A farewell's bytes and its sends, which nobody waits for until the transport goes: a buffer
// for each peer, since a send that fails (to a peer that left first) fails every later wait on
// its buffer, and must not keep the others from being waited for.
struct GlooWorkerTransport::PendingSend {
  std::vector<std::byte> bytes;
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> buffers;
};

GlooWorkerTransport::GlooWorkerTransport(::gloo::rendezvous::Store& store, GlooTransportOptions options)
    : options_(std::move(options)),
      headers_{kHeaderSlot, kHeaderPostedSlot, nullptr, {}},
      input_{kInputSlot, kInputPostedSlot, nullptr, {}} {
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
    for (ExchangeChannel* channel : {&headers_, &input_}) {
      channel->posted = std::make_unique<PostedReceives>(*context_, channel->posted_slot, kPostedExchangeBytes);
    }
    direct_ = std::make_unique<PostedReceives>(*context_, kDirectSlot, kDirectBytes);
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
  // Gloo sends a message once its peer asks for it: a peer waiting in an exchange has, and takes a
  // farewell at once; one that is leaving too never will, and is not waited for long.
  // Every buffer is waited for, so that whatever Gloo's event thread did to a buffer is over
  // before it is freed, and a peer that left first fails only its own: a wait that passes the
  // deadline fails every pair, and the waits left then end at once.
  const detail::Deadline deadline = detail::Clock::now() + std::chrono::milliseconds(200);
  std::lock_guard lock(pending_mutex_);
  for (const auto& pending : pending_) {
    for (const auto& buffer : pending->buffers) {
      try {
        buffer->waitSend(remaining(deadline));
      } catch (const std::exception&) {
        // This peer is gone, or the deadline passed.
      }
    }
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
  PostedReceives* posted = size <= channel.posted->capacity() ? channel.posted.get() : nullptr;
  TransferResult result = transfer(*context_, sends, receives, channel.slot, deadline, posted);
  if (result.failed()) {
    std::lock_guard broken(broken_mutex_);
    if (!broken_by_) broken_by_ = absl::StrCat("an exchange of the workers' agreement (", result.error, ")");
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
  auto pending = std::make_unique<PendingSend>();
  pending->bytes.assign(mine.begin(), mine.end());
  if (pending->bytes.empty()) return;
  const std::uint64_t slot = pending->bytes.size() <= headers_.posted->capacity() ? headers_.posted_slot : kHeaderSlot;
  for (int w = 0; w < options_.workers; ++w) {
    if (w == options_.rank) continue;
    auto buffer = context_->createUnboundBuffer(pending->bytes.data(), pending->bytes.size());
    buffer->send(w, slot);
    pending->buffers.push_back(std::move(buffer));
  }
  std::lock_guard lock(pending_mutex_);
  pending_.push_back(std::move(pending));
}

// A worker gives up when a deadline passes, which over Gloo has already failed every connection:
// no note can reach the others, whose own waits for it end at their deadlines.
void GlooWorkerTransport::send_gave_up(const StepName&) {}

std::vector<std::pair<int, std::string>> GlooWorkerTransport::take_gave_up() { return {}; }

void GlooWorkerTransport::data_phase_failed(const StepName& what, const std::string& failure) {
  {
    std::lock_guard lock(broken_mutex_);
    if (!broken_by_) broken_by_ = what.str();
  }
  const std::string report = absl::StrCat("worker ", options_.rank, ": the data phase of ", what.str(),
                                          " failed between the workers (", failure, ")");
  if (options_.on_stall == OnStall::kFailStrategy) {
    throw DeadlineExceededError(absl::StrCat(report, "; the strategy is unusable and the job goes on "
                                                     "(StalledCollectiveAction::kFailStrategy)"));
  }
  std::fprintf(stderr, "distribute: %s; ending this worker, whose peers then fail as they find it gone\n",
               report.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// The ring's links: one message to the next worker and one from the previous, per step.
class GlooWorkerTransport::RingLinks final : public cluster::RingLinks {
 public:
  RingLinks(GlooWorkerTransport& transport, detail::Deadline deadline) : transport_(transport), deadline_(deadline) {}
  int rank() const override { return transport_.options_.rank; }
  int size() const override { return transport_.options_.workers; }
  void send_next_receive_previous(std::span<const std::byte> to_next, std::span<std::byte> from_previous) override {
    const int next = (rank() + 1) % size();
    const int previous = (rank() + size() - 1) % size();
    // In pieces, all posted at once, so that both directions of a pair's connection stay busy:
    // one message each way may cross one direction's bytes before the other's.
    std::vector<Transfer> sends;
    std::vector<Transfer> receives;
    auto* out = const_cast<std::byte*>(to_next.data());
    for (std::size_t at = 0; at < to_next.size(); at += kRingPiece) {
      sends.push_back({next, out + at, std::min(kRingPiece, to_next.size() - at)});
    }
    for (std::size_t at = 0; at < from_previous.size(); at += kRingPiece) {
      receives.push_back({previous, from_previous.data() + at, std::min(kRingPiece, from_previous.size() - at)});
    }
    TransferResult result = transfer(*transport_.context_, sends, receives, kRingSlot, deadline_);
    if (result.failed()) {
      failure = describe_failure(result, transport_.hosts_);
      throw std::runtime_error(failure);
    }
  }
  // The step that failed, described; empty while none has.
  std::string failure;

 private:
  GlooWorkerTransport& transport_;
  detail::Deadline deadline_;
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
    if (links.failure.empty()) throw;
    data_phase_failed(what, links.failure);
  }
}

void GlooWorkerTransport::all_reduce_direct(DType dtype, std::byte* data, std::int64_t count,
                                            detail::Deadline deadline, const StepName& what) {
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  const auto workers = static_cast<std::size_t>(options_.workers);
  const auto me = static_cast<std::size_t>(options_.rank);
  ring_scratch_.resize(bytes * workers);
  std::byte* all = ring_scratch_.data();
  std::memcpy(all + me * bytes, data, bytes);
  std::vector<Transfer> sends;
  std::vector<Transfer> receives;
  for (int w = 0; w < options_.workers; ++w) {
    if (w == options_.rank) continue;
    sends.push_back({w, all + me * bytes, bytes});
    receives.push_back({w, all + static_cast<std::size_t>(w) * bytes, bytes});
  }
  TransferResult result = transfer(*context_, sends, receives, kDirectSlot, deadline, direct_.get());
  if (result.failed()) data_phase_failed(what, describe_failure(result, hosts_));
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
  if (result.failed()) data_phase_failed(what, describe_failure(result, hosts_));
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
  if (result.failed()) data_phase_failed(what, describe_failure(result, hosts_));
}

}  // namespace distribute::cluster::gloo_backend
