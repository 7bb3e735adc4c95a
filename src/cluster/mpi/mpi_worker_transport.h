// distribute::detail: the workers' transport over MPI. One process is one worker (its rank in
// MPI_COMM_WORLD, or in the communicator the cluster resolver names); the transport works on
// communicators of its own, duplicated from that one and kept for the next strategy when this
// one goes (see the .cc), so that the program's own MPI traffic never matches the strategy's.
// Every wait polls non-blocking MPI calls against the collective's deadline: a header exchange
// that times out names the workers that did not send theirs, and a data phase that stalls past
// the deadline is reported, naming the workers that do not answer a liveness query. A collective
// left half done cannot be taken back, so the report then ends the job (MPI_Abort), or, as the
// strategy's options may ask (StalledCollectiveAction::kFailStrategy), is thrown while the
// abandoned transfers go on into the transport's own buffers. A worker whose header exchange
// times out tells the others that it gave up, so that a late worker does not start the step's
// data phase with it (see cluster::WorkerTransport::send_gave_up).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "cluster/worker_transport.h"
#include "distribute/mpi/multi_worker_mirrored_strategy.h"

namespace distribute::detail {

// Calls into MPI from several threads (several strategies, or the caller and a replica thread)
// are serialised by this lock, so that MPI_THREAD_SERIALIZED suffices.
extern Mutex mpi_mutex;

// Initialises MPI unless the program has (requesting MPI_THREAD_MULTIPLE, requiring
// MPI_THREAD_SERIALIZED, else UnavailableError), then finalises it at exit.
void ensure_mpi_initialized();

// Every rank's host name (MPI_Get_processor_name) on `base`, in rank order.
std::vector<std::string> processor_names(MPI_Comm base) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mpi_mutex);

class MpiWorkerTransport final : public cluster::WorkerTransport {
 public:
  // Open MPI 4.1's collectives slow down sharply above about 16 MiB per call.
  static constexpr std::size_t kMaxBytesPerCall = std::size_t{16} << 20;
  // The ring's point-to-point messages do not, and cutting a ring into pieces drains the link
  // between them (a 64 MiB all_reduce across 2 hosts at 10 Gbit/s took 100 ms in 16 MiB pieces,
  // 65 ms in one): in place, a ring goes whole up to this, which keeps each message's count
  // within MPI's int. With kFailStrategy it goes in pieces of kMaxBytesPerCall, which bounds the
  // buffers a stalled call keeps.
  static constexpr std::size_t kMaxRingBytesPerCall = std::size_t{1} << 30;
  // The largest message of a ring step (see cluster::RingLinks in the .cc).
  static constexpr std::size_t kRingMessageBytes = std::size_t{1} << 20;
  // From this size an all_reduce goes around a ring of point-to-point messages
  // (cluster/cluster::ring_all_reduce.h) instead of MPI_Iallreduce, whose non-blocking form is
  // slower than the blocking one in Open MPI 4.1 (docs/multi_worker.md).
  static constexpr std::size_t kMinRingBytes = std::size_t{64} << 10;

  // The workers are the ranks of `base`; `on_stall` says what a stalled data phase does.
  MpiWorkerTransport(MPI_Comm base, StalledCollectiveAction on_stall);
  ~MpiWorkerTransport() override;
  int num_workers() const override { return size_; }
  int worker_id() const override { return rank_; }
  int workers_on_this_host() const override { return on_host_; }
  const std::vector<std::string>& hosts() const override { return hosts_; }
  std::vector<int> exchange(std::span<const std::byte> mine, std::span<std::byte> all, Deadline deadline) override {
    return exchange_on(kHeaderTag, mine, all, deadline);
  }
  std::vector<int> exchange_input(std::span<const std::byte> mine, std::span<std::byte> all,
                                  Deadline deadline) override {
    return exchange_on(kInputTag, mine, all, deadline);
  }
  void all_reduce(DType dtype, void* data, std::int64_t count, Deadline deadline, const cluster::StepName& what) override;
  void all_gather(const void* mine, std::span<const std::size_t> sizes, void* out, Deadline deadline,
                  const cluster::StepName& what) override;
  void broadcast(void* data, std::size_t bytes, int root, Deadline deadline, const cluster::StepName& what) override;
  void send_farewell(std::span<const std::byte> mine) override;
  void send_gave_up(const cluster::StepName& what) override;
  std::vector<std::pair<int, std::string>> take_gave_up() override;

 private:
  // The tags of the two exchanges on the collectives' communicator (the others are in the .cc).
  static constexpr int kHeaderTag = 17;
  static constexpr int kInputTag = 23;
  // Sends `mine` to every worker and receives theirs, with `tag`.
  std::vector<int> exchange_on(int tag, std::span<const std::byte> mine, std::span<std::byte> all, Deadline deadline);
  // Sends `mine` to every other worker with `tag`, without waiting.
  struct PendingSends;
  PendingSends send_to_every_worker(int tag, std::span<const std::byte> mine);
  // Receives the `bytes` of each worker in `waiting` whose message of `tag` has come into its
  // place in `all`, and leaves in `waiting` those whose has not.
  void receive_arrived(int tag, std::vector<int>& waiting, std::span<std::byte> all, std::size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mpi_mutex);
  // Waits for every request of a data phase; past `deadline`, reports `what` and the workers that
  // do not answer a liveness query (stalled). When it throws, the requests are abandoned.
  void wait_for_data(std::span<MPI_Request> requests, Deadline deadline, const cluster::StepName& what);
  // Past the deadline of `requests`: asks the other workers whether they are alive, for a grace
  // period. Returns what was found (the silent workers, or another worker's finding), or nothing
  // when the requests completed meanwhile.
  std::optional<std::string> find_stall(std::span<MPI_Request> requests);
  // Ends the job with `report` on stderr, or throws it as DeadlineExceededError, as on_stall_ says.
  void stalled(const std::string& report);
  // Where a data phase's MPI calls work on the `bytes` that belong at `data`: `data` itself with
  // kEndJob, else data_scratch_, into which the caller copies them (and out of it after).
  std::byte* workspace(void* data, std::size_t bytes);
  // Keeps `requests`, and every buffer of the transport that a data phase hands MPI, in
  // abandoned_: MPI may still complete them (the caller does not hold the MPI lock).
  void abandon(std::span<MPI_Request> requests);
  // The ring's links: an MPI_Isend to the next worker and an MPI_Irecv from the previous one per
  // step, waited for like every other wait.
  class RingLinks;
  // In a data phase: when other workers gave up on the step (their notes came), throws
  // DeadlineExceededError if every other worker did, else reports it as a stall does.
  void leave_if_others_gave_up(const cluster::StepName& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mpi_mutex);
  // Answers other workers' liveness queries (the caller holds the MPI lock).
  void answer_queries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mpi_mutex);
  // Moves the other workers' gave-up notes that have come into gave_up_ (the caller holds the
  // MPI lock).
  void receive_gave_up() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mpi_mutex);
  // Sends a copy of `bytes` at `data` to every other worker on the liveness communicator.
  void send_to_others(const void* data, std::size_t bytes, int tag);
  // `bytes` at `data` after the nonce: every message of the engine is framed so.
  std::unique_ptr<std::byte[]> framed(const void* data, std::size_t bytes) const;
  // A message of this strategy received, its nonce taken off.
  struct Message {
    int source;
    std::vector<std::byte> payload;
    std::string text() const { return std::string(reinterpret_cast<const char*>(payload.data()), payload.size()); }
  };
  // The next message of `tag` from `source` (or MPI_ANY_SOURCE) on `comm` that has come, dropping
  // other strategies' on the way; nothing when none has come. Never waits (the caller holds the
  // MPI lock).
  std::optional<Message> take_message(MPI_Comm comm, int source, int tag) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mpi_mutex);
  // Drops the pending sends that have completed (the caller holds the MPI lock).
  void reap_sends() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mpi_mutex);

  // Sends of one buffer that may still be in flight.
  struct PendingSends {
    std::vector<MPI_Request> requests;
    std::unique_ptr<std::byte[]> buffer;
  };
  // The requests of data phases given up at their deadline, and every buffer they may still read
  // or write, kept until the requests complete: past the transport's life, until MPI_Finalize.
  struct Abandoned {
    std::vector<MPI_Request> requests;
    std::vector<std::vector<std::byte>> buffers;
  };
  // Those of transports that went, not yet complete (the caller holds the MPI lock).
  static std::vector<Abandoned>& orphaned() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mpi_mutex);

  // A step was abandoned (a worker did not follow): the slot serves no other strategy, and
  // MPI_Finalize at exit is bounded, as that worker may never come.
  void give_up_slot();

  // The communicators are a slot of those kept for the strategies on `base_` (see the .cc).
  MPI_Comm base_ = MPI_COMM_NULL;
  int slot_ = 0;
  // Whether the slot may serve another strategy: false once a step was abandoned.
  std::atomic<bool> reusable_{true};
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;  // liveness queries, apart from the collectives' traffic
  std::int64_t queries_ ABSL_GUARDED_BY(mpi_mutex) = 0;
  const StalledCollectiveAction on_stall_;
  std::vector<std::byte> ring_scratch_;  // the part a ring step receives before adding it (cluster::ring_all_reduce)
  // kFailStrategy: a data phase's whole buffer, so that no abandoned request can touch the caller's.
  std::vector<std::byte> data_scratch_;
  Abandoned abandoned_ ABSL_GUARDED_BY(mpi_mutex);
  // A number every worker's engine of this strategy shares (worker 0 draws it): see exchange_on.
  std::uint64_t nonce_ = 0;
  // Sends of exchanges abandoned at a deadline, and of notes to the other workers.
  std::vector<PendingSends> pending_sends_ ABSL_GUARDED_BY(mpi_mutex);
  std::vector<std::pair<int, std::string>> gave_up_ ABSL_GUARDED_BY(mpi_mutex);  // notes received, not yet taken
  int rank_ = 0;
  int size_ = 1;
  int on_host_ = 1;
  std::vector<std::string> hosts_;  // each worker's host name
};

}  // namespace distribute::detail
