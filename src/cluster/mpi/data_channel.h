// distribute::cluster::mpi: the transport's data phases, once the control channel's exchange has
// agreed on a step. Each goes in non-blocking MPI calls (or, for a large all_reduce, around a
// ring of point-to-point messages, cluster/ring_all_reduce.h) whose requests the stall detector
// waits for against the step's deadline. With OnStall::kFailStrategy, MPI works on the channel's
// own buffers, never the caller's, so that what a stalled phase abandons touches nothing else.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/wait.h"
#include "cluster/mpi/communicator_slots.h"
#include "cluster/mpi/stall_detector.h"
#include "cluster/worker_transport.h"
#include "distribute/device/dtype.h"

namespace distribute::cluster::mpi {

class MpiDataChannel {
 public:
  // Open MPI 4.1's collectives slow down sharply above about 16 MiB per call.
  static constexpr std::size_t kMaxBytesPerCall = std::size_t{16} << 20;
  // The ring's point-to-point messages do not, and cutting a ring into pieces drains the link
  // between them (a 64 MiB all_reduce across 2 hosts at 10 Gbit/s took 100 ms in 16 MiB pieces,
  // 65 ms in one): in place, a ring goes whole up to this, which keeps each message's count
  // within MPI's int. With kFailStrategy it goes in pieces of kMaxBytesPerCall, which bounds the
  // buffers a stalled call keeps.
  static constexpr std::size_t kMaxRingBytesPerCall = std::size_t{1} << 30;
  // The largest message of a ring step (see RingLinks in the .cc).
  static constexpr std::size_t kRingMessageBytes = std::size_t{1} << 20;
  // From this size an all_reduce goes around a ring of point-to-point messages
  // (cluster/ring_all_reduce.h) instead of MPI_Iallreduce, whose non-blocking form is slower than
  // the blocking one in Open MPI 4.1 (docs/multi_worker.md).
  static constexpr std::size_t kMinRingBytes = std::size_t{64} << 10;

  MpiDataChannel(CommunicatorSlot& slot, StallDetector& stall) : slot_(slot), stall_(stall) {}

  // As cluster::DataChannel says.
  int all_reduce(DType dtype, void* data, std::int64_t count, Compression compression, detail::Deadline deadline,
                 const StepName& what);
  void all_gather(const void* mine, std::span<const std::size_t> sizes, void* out, detail::Deadline deadline,
                  const StepName& what);
  void broadcast(void* data, std::size_t bytes, int root, detail::Deadline deadline, const StepName& what);

 private:
  // The ring's links: an MPI_Isend to the next worker and an MPI_Irecv from the previous one per
  // step, waited for like every other wait.
  class RingLinks;
  // Waits for every request of a data phase (StallDetector::wait_for_data); when it throws, the
  // requests are abandoned.
  void wait(std::span<MPI_Request> requests, detail::Deadline deadline, const StepName& what);
  // Abandons `requests` with every buffer of the channel that a data phase hands MPI.
  void abandon(std::span<MPI_Request> requests);
  // Where a data phase's MPI calls work on the `bytes` that belong at `data`: `data` itself with
  // kEndJob, else data_scratch_, into which the caller copies them (and out of it after).
  std::byte* workspace(void* data, std::size_t bytes);

  CommunicatorSlot& slot_;
  StallDetector& stall_;
  std::vector<std::byte> ring_scratch_;  // the part a ring step receives before adding it (ring_all_reduce)
  // kFailStrategy: a data phase's whole buffer, so that no abandoned request can touch the caller's.
  std::vector<std::byte> data_scratch_;
};

}  // namespace distribute::cluster::mpi
