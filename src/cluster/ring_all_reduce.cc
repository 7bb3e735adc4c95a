// The ring all-reduce: the reduce-scatter, then the all-gather, over RingLinks.
#include "cluster/ring_all_reduce.h"

#include <algorithm>
#include <stdexcept>

#include "collective/compression.h"
#include "device/kernels.h"
#include "distribute/device/reduce_op.h"

namespace distribute::cluster {

namespace {

// Makes `scratch` at least `bytes` long, never shorter: a vector zero-fills what it grows by, and
// a caller alternating between sizes would pay that fill (half a millisecond for 8 MiB) on every
// larger call.
void grow(std::vector<std::byte>& scratch, std::size_t bytes) {
  if (scratch.size() < bytes) scratch.resize(bytes);
}

// The ring of ring_all_reduce in pieces of links.piece_bytes(). Step s (of 2 (size - 1): the
// reduce-scatter's, then the all-gather's) receives part recv_part(s), and step s + 1 sends that
// same part on; so each piece goes on as soon as it has come (and, in the reduce-scatter, been
// added), and only the first step waits for a whole part.
void pipelined_ring_all_reduce(RingLinks& links, DType dtype, std::byte* data, std::int64_t count,
                               std::vector<std::byte>& scratch) {
  const int size = links.size();
  const int rank = links.rank();
  const std::size_t unit = dtype_size(dtype);
  const auto piece = static_cast<std::int64_t>(std::max<std::size_t>(links.piece_bytes() / unit, 1));
  // Part p (any integer, taken modulo size) is elements [begin(p), end(p)).
  const auto modulo = [&](int p) { return static_cast<std::int64_t>((p % size + size) % size); };
  const auto begin = [&](int p) { return count * modulo(p) / size; };
  const auto end = [&](int p) { return count * (modulo(p) + 1) / size; };
  const auto bytes = [&](std::int64_t from, std::int64_t n) {
    return std::span(data + static_cast<std::size_t>(from) * unit, static_cast<std::size_t>(n) * unit);
  };
  const int reduce_steps = size - 1;
  const int steps = 2 * reduce_steps;
  const auto recv_part = [&](int s) { return s < reduce_steps ? rank - s - 1 : rank - (s - reduce_steps); };
  grow(scratch, static_cast<std::size_t>(std::min(piece, count / size + 1)) * unit);
  for (std::int64_t at = begin(rank); at < end(rank); at += piece) links.send_next(bytes(at, std::min(piece, end(rank) - at)));
  for (int s = 0; s < steps; ++s) {
    const int p = recv_part(s);
    for (std::int64_t at = begin(p); at < end(p); at += piece) {
      const std::int64_t n = std::min(piece, end(p) - at);
      const std::span<std::byte> into = bytes(at, n);
      if (s < reduce_steps) {
        links.receive_previous(std::span(scratch.data(), into.size()));
        const void* inputs[] = {into.data(), scratch.data()};
        detail::reduce_buffers(dtype, ReduceOp::kSum, inputs, into.data(), n, 1);
      } else {
        links.receive_previous(into);
      }
      if (s + 1 < steps) links.send_next(into);
    }
  }
  links.flush();
}

}  // namespace

void RingLinks::send_next(std::span<const std::byte>) {
  throw std::logic_error("RingLinks::send_next: these links do not stream (piece_bytes() is 0)");
}

void RingLinks::receive_previous(std::span<std::byte>) {
  throw std::logic_error("RingLinks::receive_previous: these links do not stream (piece_bytes() is 0)");
}

void RingLinks::flush() {}

void ring_all_reduce(RingLinks& links, DType dtype, std::byte* data, std::int64_t count,
                     std::vector<std::byte>& scratch) {
  const int size = links.size();
  const int rank = links.rank();
  if (size == 1 || count == 0) return;
  if (links.piece_bytes() > 0) {
    pipelined_ring_all_reduce(links, dtype, data, count, scratch);
    return;
  }
  const std::size_t unit = dtype_size(dtype);
  // Part p is elements [begin(p), begin(p + 1)).
  const auto begin = [&](int p) { return count * p / size; };
  const auto part = [&](int p) {
    return std::span(data + static_cast<std::size_t>(begin(p)) * unit,
                     static_cast<std::size_t>(begin(p + 1) - begin(p)) * unit);
  };
  grow(scratch, static_cast<std::size_t>(count / size + 1) * unit);
  // After step s this rank holds the sum of part (rank - s - 1) over ranks rank - s - 1 .. rank;
  // after size - 1 steps, the whole sum of part rank + 1.
  for (int s = 0; s < size - 1; ++s) {
    const int send = (rank - s + size) % size;
    const int receive = (rank - s - 1 + size) % size;
    const std::span<std::byte> into = part(receive);
    links.send_next_receive_previous(part(send), std::span(scratch.data(), into.size()));
    const void* inputs[] = {into.data(), scratch.data()};
    detail::reduce_buffers(dtype, ReduceOp::kSum, inputs, into.data(), begin(receive + 1) - begin(receive), 1);
  }
  for (int s = 0; s < size - 1; ++s) {
    const int send = (rank + 1 - s + size) % size;
    const int receive = (rank - s + size) % size;
    links.send_next_receive_previous(part(send), part(receive));
  }
}

int ring_all_reduce_compressed(RingLinks& links, Compression compression, float* data, std::int64_t count,
                               std::vector<std::byte>& scratch) {
  using collective::Wire16;
  const int size = links.size();
  const int rank = links.rank();
  if (size == 1) return -1;
  const auto begin = [&](int p) { return count * p / size; };
  const auto length = [&](int p) { return begin(p + 1) - begin(p); };
  // The wire copy of the data: part p at begin(p) + p, its values and then its owner's flag.
  const std::int64_t wire_count = count + size;
  const std::int64_t received_count = count / size + 1;
  grow(scratch, static_cast<std::size_t>(wire_count + received_count) * sizeof(Wire16));
  auto* wire = reinterpret_cast<Wire16*>(scratch.data());
  Wire16* received = wire + wire_count;
  const auto wire_part = [&](int p) { return wire + begin(p) + p; };
  const auto bytes = [](Wire16* at, std::int64_t n) {
    return std::span(reinterpret_cast<std::byte*>(at), static_cast<std::size_t>(n) * sizeof(Wire16));
  };
  bool overflow = false;
  for (int s = 0; s < size - 1; ++s) {
    const int send = (rank - s + size) % size;
    const int receive = (rank - s - 1 + size) % size;
    overflow |= collective::narrow(compression, data + begin(send), wire_part(send), length(send));
    links.send_next_receive_previous(bytes(wire_part(send), length(send)), bytes(received, length(receive)));
    collective::widen_add(compression, received, data + begin(receive), length(receive));
  }
  const int own = (rank + 1) % size;
  overflow |= collective::narrow(compression, data + begin(own), wire_part(own), length(own));
  wire_part(own)[length(own)] = overflow ? static_cast<Wire16>(rank + 1) : Wire16{0};
  for (int s = 0; s < size - 1; ++s) {
    const int send = (rank + 1 - s + size) % size;
    const int receive = (rank - s + size) % size;
    links.send_next_receive_previous(bytes(wire_part(send), length(send) + 1), bytes(wire_part(receive), length(receive) + 1));
  }
  int overflowed = -1;
  for (int p = 0; p < size; ++p) {
    collective::widen(compression, wire_part(p), data + begin(p), length(p));
    const Wire16 flag = wire_part(p)[length(p)];
    if (flag != 0 && (overflowed < 0 || flag - 1 < overflowed)) overflowed = flag - 1;
  }
  return overflowed;
}

}  // namespace distribute::cluster
