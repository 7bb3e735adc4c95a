// distribute::cluster: the ring all-reduce, apart from any transport (as gloo keeps its
// allreduce_ring apart from its transports). The ranks form a ring; each step sends one part of
// the data to the next rank while receiving another from the previous one. A reduce-scatter
// (size - 1 steps) leaves each rank with the whole sum of one part, summed in one place, and an
// all-gather (size - 1 steps) copies every summed part to every rank, so every rank ends with
// the same bits. The cross-worker engine drives it over MPI point-to-point messages; the tests
// drive it over threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

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
};

// data = the sum over the ring's ranks of their `count` elements of `dtype` at `data`, in place.
// `scratch` holds the part each reduce-scatter step receives (resized as needed; kept between
// calls so that a caller reducing often allocates once).
void ring_all_reduce(RingLinks& links, DType dtype, std::byte* data, std::int64_t count,
                     std::vector<std::byte>& scratch);

}  // namespace distribute::cluster
