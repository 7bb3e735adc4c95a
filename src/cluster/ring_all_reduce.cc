// The ring all-reduce: the reduce-scatter, then the all-gather, over RingLinks.
#include "cluster/ring_all_reduce.h"

#include "device/kernels.h"
#include "distribute/device/reduce_op.h"

namespace distribute::cluster {

void ring_all_reduce(RingLinks& links, DType dtype, std::byte* data, std::int64_t count,
                     std::vector<std::byte>& scratch) {
  const int size = links.size();
  const int rank = links.rank();
  if (size == 1 || count == 0) return;
  const std::size_t unit = dtype_size(dtype);
  // Part p is elements [begin(p), begin(p + 1)).
  const auto begin = [&](int p) { return count * p / size; };
  const auto part = [&](int p) {
    return std::span(data + static_cast<std::size_t>(begin(p)) * unit,
                     static_cast<std::size_t>(begin(p + 1) - begin(p)) * unit);
  };
  scratch.resize(static_cast<std::size_t>(count / size + 1) * unit);
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

}  // namespace distribute::cluster
