// MpiControlChannel: nonce-framed messages, the exchanges, the farewell and the gave-up notes.
#include "cluster/mpi/control_channel.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "distribute/errors.h"

namespace distribute::cluster::mpi {

std::unique_ptr<std::byte[]> MpiControlChannel::framed(const void* data, std::size_t bytes) const {
  const std::uint64_t nonce = slot_.nonce();
  auto out = std::make_unique<std::byte[]>(kNonceBytes + bytes);
  std::memcpy(out.get(), &nonce, kNonceBytes);
  if (bytes != 0) std::memcpy(out.get() + kNonceBytes, data, bytes);
  return out;
}

std::optional<MpiControlChannel::Message> MpiControlChannel::take_message(MPI_Comm comm, int source, int tag) {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(source, tag, comm, &flag, &status);
    if (!flag) return std::nullopt;
    int length = 0;
    MPI_Get_count(&status, MPI_BYTE, &length);
    Message message{status.MPI_SOURCE, std::vector<std::byte>(static_cast<std::size_t>(length))};
    MPI_Recv(message.payload.data(), length, MPI_BYTE, status.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE);
    std::uint64_t nonce = 0;
    if (message.payload.size() < sizeof nonce) continue;
    std::memcpy(&nonce, message.payload.data(), sizeof nonce);
    if (nonce != slot_.nonce()) continue;
    message.payload.erase(message.payload.begin(), message.payload.begin() + sizeof nonce);
    return message;
  }
}

void MpiControlChannel::reap_sends() {
  std::erase_if(pending_sends_, [](PendingSends& pending) {
    int done = 0;
    MPI_Testall(static_cast<int>(pending.requests.size()), pending.requests.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  });
}

void MpiControlChannel::leave() {
  reap_sends();
  // A send no worker will receive (its peer left first) may hold its buffer until MPI_Finalize.
  for (PendingSends& pending : pending_sends_) {
    for (MPI_Request& request : pending.requests) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    }
    MpiRuntime::instance().keep_unreceived(std::move(pending.buffer));
  }
}

MpiControlChannel::PendingSends MpiControlChannel::send_to_every_worker(int tag, std::span<const std::byte> mine) {
  PendingSends sends{{}, framed(mine.data(), mine.size())};
  NonBlockingMpiLock lock;
  reap_sends();
  for (int w = 0; w < slot_.size(); ++w) {
    if (w == slot_.rank()) continue;
    sends.requests.emplace_back();
    check(MPI_Isend(sends.buffer.get(), static_cast<int>(kNonceBytes + mine.size()), MPI_BYTE, w, tag,
                    slot_.comm(), &sends.requests.back()),
          "MPI_Isend");
  }
  return sends;
}

void MpiControlChannel::receive_arrived(int tag, std::vector<int>& waiting, std::span<std::byte> all,
                                        std::size_t bytes) {
  std::vector<int> still;
  for (int w : waiting) {
    const std::optional<Message> message = take_message(slot_.comm(), w, tag);
    if (!message) {
      still.push_back(w);
      continue;
    }
    if (message->payload.size() != bytes) {
      throw InternalError(absl::StrCat("worker ", w, " sent ", message->payload.size(), " bytes where ", bytes,
                                       " were expected"));
    }
    std::memcpy(all.data() + static_cast<std::size_t>(w) * bytes, message->payload.data(), bytes);
  }
  waiting = std::move(still);
}

std::vector<int> MpiControlChannel::exchange(int tag, std::span<const std::byte> mine, std::span<std::byte> all,
                                             detail::Deadline deadline, absl::FunctionRef<void()> idle) {
  const std::size_t bytes = mine.size();
  std::memcpy(all.data() + static_cast<std::size_t>(slot_.rank()) * bytes, mine.data(), bytes);
  if (slot_.size() == 1) return {};
  // Every message starts with the strategy's nonce, so that one left for an earlier strategy on
  // the same communicators (a worker's last header to a strategy that the others had left, say)
  // is dropped. Messages are probed before they are received, so one of another size never
  // truncates.
  PendingSends sends = send_to_every_worker(tag, mine);
  std::vector<int> waiting;  // peers whose message has not come
  for (int w = 0; w < slot_.size(); ++w) {
    if (w != slot_.rank()) waiting.push_back(w);
  }
  const bool done = detail::poll_until(
      [&] {
        NonBlockingMpiLock lock;
        receive_arrived(tag, waiting, all, bytes);
        if (!waiting.empty()) return false;
        int sent = 0;
        MPI_Testall(static_cast<int>(sends.requests.size()), sends.requests.data(), &sent, MPI_STATUSES_IGNORE);
        return sent != 0;
      },
      deadline, idle);
  if (done) return {};
  // Abandoned: the sends keep their buffer until they complete (reap_sends).
  NonBlockingMpiLock lock;
  pending_sends_.push_back(std::move(sends));
  slot_.give_up();
  return waiting;
}

void MpiControlChannel::send_farewell(std::span<const std::byte> mine) {
  if (slot_.size() == 1) return;
  detail::MutexLock lock(MpiRuntime::instance().mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A header is small enough to go eagerly: each send returns without the peer receiving it, and
  // a peer that never does (it is leaving too) leaves it unmatched.
  const std::unique_ptr<std::byte[]> message = framed(mine.data(), mine.size());
  for (int w = 0; w < slot_.size(); ++w) {
    if (w != slot_.rank()) {
      check(MPI_Send(message.get(), static_cast<int>(kNonceBytes + mine.size()), MPI_BYTE, w, kHeaderTag,
                     slot_.comm()),
            "MPI_Send");
    }
  }
}

void MpiControlChannel::send_to_others(const void* data, std::size_t bytes, int tag) {
  // The message outlives this call: a worker that never reads it leaves the send pending. It is
  // small, so it goes eagerly.
  PendingSends sends{{}, framed(data, bytes)};
  NonBlockingMpiLock lock;
  reap_sends();
  for (int w = 0; w < slot_.size(); ++w) {
    if (w == slot_.rank()) continue;
    sends.requests.emplace_back();
    MPI_Isend(sends.buffer.get(), static_cast<int>(kNonceBytes + bytes), MPI_BYTE, w, tag,
              slot_.probe_comm(), &sends.requests.back());
  }
  pending_sends_.push_back(std::move(sends));
}

void MpiControlChannel::send_gave_up(const StepName& what) {
  slot_.give_up();
  if (slot_.size() > 1) {
    const std::string step = what.str();
    send_to_others(step.data(), step.size(), kGaveUpTag);
  }
}

void MpiControlChannel::receive_gave_up() {
  while (const std::optional<Message> note = take_message(slot_.probe_comm(), MPI_ANY_SOURCE, kGaveUpTag)) {
    gave_up_.emplace_back(note->source, note->text());
  }
}

std::vector<std::pair<int, std::string>> MpiControlChannel::take_gave_up() {
  if (slot_.size() == 1) return {};
  NonBlockingMpiLock lock;
  receive_gave_up();
  if (!gave_up_.empty()) slot_.give_up();
  return std::exchange(gave_up_, {});
}

}  // namespace distribute::cluster::mpi
