// distribute::cluster::mpi: the transport's messages, as opposed to its data. Every message starts
// with the slot's nonce and is probed before it is received, so that one left for an earlier
// strategy on the same communicators is dropped and one of another size never truncates. The
// exchanges that agree on each step, a worker's farewell and its gave-up notes go here, and so do
// the stall detector's liveness queries (stall_detector.h), on the slot's other communicator.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "base/wait.h"
#include "cluster/mpi/communicator_slots.h"
#include "cluster/mpi/runtime.h"
#include "cluster/worker_transport.h"

namespace distribute::cluster::mpi {

class MpiControlChannel {
 public:
  explicit MpiControlChannel(CommunicatorSlot& slot) : slot_(slot) {}

  // Sends `mine` to every worker and receives theirs, with `tag`, as ControlChannel::exchange
  // says; `idle` runs between polls once the wait has gone on a while.
  std::vector<int> exchange(int tag, std::span<const std::byte> mine, std::span<std::byte> all,
                            detail::Deadline deadline, absl::FunctionRef<void()> idle);
  void send_farewell(std::span<const std::byte> mine);
  void send_gave_up(const StepName& what);
  std::vector<std::pair<int, std::string>> take_gave_up();

  // Moves the other workers' gave-up notes that have come into gave_up().
  void receive_gave_up() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());
  // The notes received, not yet taken: {worker, step}.
  const std::vector<std::pair<int, std::string>>& gave_up() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex()) {
    return gave_up_;
  }

  // A message of this strategy received, its nonce taken off.
  struct Message {
    int source;
    std::vector<std::byte> payload;
    std::string text() const { return std::string(reinterpret_cast<const char*>(payload.data()), payload.size()); }
  };
  // The next message of `tag` from `source` (or MPI_ANY_SOURCE) on `comm` that has come, dropping
  // other strategies' on the way; nothing when none has come. Never waits.
  std::optional<Message> take_message(MPI_Comm comm, int source, int tag)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());
  // The nonce before each message's bytes.
  static constexpr std::size_t kNonceBytes = sizeof(std::uint64_t);
  // `bytes` at `data` after the nonce: every message of the transport is framed so.
  std::unique_ptr<std::byte[]> framed(const void* data, std::size_t bytes) const;
  // Sends a copy of `bytes` at `data` to every other worker on the liveness communicator.
  void send_to_others(const void* data, std::size_t bytes, int tag);

  // The transport goes: hands the sends still pending to the runtime.
  void leave() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());

 private:
  // Sends of one buffer that may still be in flight.
  struct PendingSends {
    std::vector<MPI_Request> requests;
    std::unique_ptr<std::byte[]> buffer;
  };
  // Sends `mine` to every other worker with `tag`, without waiting.
  PendingSends send_to_every_worker(int tag, std::span<const std::byte> mine);
  // Receives the `bytes` of each worker in `waiting` whose message of `tag` has come into its
  // place in `all`, and leaves in `waiting` those whose has not.
  void receive_arrived(int tag, std::vector<int>& waiting, std::span<std::byte> all, std::size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());
  // Drops the pending sends that have completed.
  void reap_sends() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());

  CommunicatorSlot& slot_;
  // Sends of exchanges abandoned at a deadline, and of notes to the other workers.
  std::vector<PendingSends> pending_sends_ ABSL_GUARDED_BY(MpiRuntime::instance().mutex());
  std::vector<std::pair<int, std::string>> gave_up_ ABSL_GUARDED_BY(MpiRuntime::instance().mutex());
};

}  // namespace distribute::cluster::mpi
