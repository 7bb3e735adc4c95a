// distribute::cluster: the ring all-reduce, apart from any transport (as gloo keeps its
// allreduce_ring apart from its transports). The ranks form a ring; each step sends one part of
// the data to the next rank while receiving another from the previous one. A reduce-scatter
// (size - 1 steps) leaves each rank with the whole sum of one part, summed in one place, and an
// all-gather (size - 1 steps) copies every summed part to every rank, so every rank ends with
// the same bits. The cross-worker engines drive it over MPI point-to-point messages and over Gloo
// pairs (pipelined: cut into pieces, each sent on as it comes); the tests drive it over threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "distribute/collective/communication_options.h"
#include "distribute/device/dtype.h"

namespace distribute::cluster {

// One rank's links to its neighbours in the ring.
class RingLinks {
 public:
  virtual ~RingLinks() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sends `to_next` to rank (rank() + 1) % size() and receives from rank (rank() - 1) % size()
  // into `from_previous` (of the size that rank sends), both at once; returns when both are done.
  // Throws what the transport throws (a deadline, a failed peer).
  virtual void send_next_receive_previous(std::span<const std::byte> to_next, std::span<std::byte> from_previous) = 0;

  // Links that also stream (piece_bytes() > 0) let ring_all_reduce pipeline its steps: it sends
  // each piece of a part on as soon as that piece has come (and been added), so that the link
  // does not wait at each step's start for the whole of the step before. 0: step by step.
  virtual std::size_t piece_bytes() const { return 0; }
  // Queues `bytes` to rank (rank() + 1) % size() as one message, behind those queued before, and
  // returns at once. The bytes must stay as they are until that rank has them (at the latest
  // until flush() returns).
  virtual void send_next(std::span<const std::byte> bytes);
  // Waits for the next message from rank (rank() - 1) % size(), of into.size() bytes, into `into`.
  virtual void receive_previous(std::span<std::byte> into);
  // Waits until every queued message has been sent. Throws what the transport throws.
  virtual void flush();
};

// data = the sum over the ring's ranks of their `count` elements of `dtype` at `data`, in place.
// `scratch` holds the part each reduce-scatter step receives (grown as needed and never shrunk;
// kept between calls so that a caller reducing often allocates and fills it once).
void ring_all_reduce(RingLinks& links, DType dtype, std::byte* data, std::int64_t count,
                     std::vector<std::byte>& scratch);

// data = the sum over the ring's ranks of their `count` float32 values at `data`, in place, the
// values crossing each link in `compression`'s 16 bits (collective/compression.h): each rank adds
// what it receives in float32, and the owner of each part rounds its whole sum, which then goes
// around unchanged, so that every rank ends with the same bits. The owners' parts carry one more
// 16-bit word, the lowest rank + 1 whose rounding overflowed (0: none), so that every rank learns
// of any overflow without another message. Returns that rank, -1 for none, the same on every rank.
// `scratch` as above.
int ring_all_reduce_compressed(RingLinks& links, Compression compression, float* data, std::int64_t count,
                               std::vector<std::byte>& scratch);

}  // namespace distribute::cluster
