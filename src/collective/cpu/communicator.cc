// The shared-memory backend: slice-parallel all_reduce, all_gather, staging of small collectives.
#include "collective/cpu/communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "device/kernels.h"

namespace distribute::collective::cpu {
namespace {

using detail::concat_buffers;
using detail::reduce_buffers;
using detail::stream_copy;
using detail::stream_fence;

constexpr std::size_t kCacheLine = 64;

constexpr std::size_t kMinChunkBytes = 1024;

// The size of the cache the replicas' cores share, from sysfs (sysconf reports the whole
// package's L3 on some virtual machines, not what one core can use).
std::size_t shared_cache_bytes() {
  static const std::size_t bytes = [] {
    std::size_t kib = 0;
    if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
      if (std::fscanf(f, "%zuK", &kib) != 1) kib = 0;
      std::fclose(f);
    }
    return kib != 0 ? kib * 1024 : std::size_t{32} << 20;
  }();
  return bytes;
}

// Reduces bytes [begin, end) of `leaf` (at most one chunk) across every replica's input and
// writes the result to every replica's output: through `scratch` and streaming stores when the
// collective's inputs and outputs do not fit in the shared cache (so writing an output costs no
// read of its old contents), else into this replica's output and, unless `copy_later` (the
// outputs lie in blocks of one layout: the whole chunk is copied at once), copied from there.
void reduce_range(std::span<CollectiveOp* const> ops, int rank, std::size_t leaf, std::size_t begin,
                  std::size_t end, std::byte* scratch, bool copy_later) {
  const CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  const DType dtype = mine.inputs[leaf].dtype;
  const std::size_t n = ops.size();
  const std::size_t bytes = end - begin;
  absl::InlinedVector<const void*, 8> inputs(n);
  for (std::size_t r = 0; r < n; ++r) inputs[r] = static_cast<const char*>(ops[r]->input_data[leaf]) + begin;
  const auto count = static_cast<std::int64_t>(bytes / dtype_size(dtype));
  const auto output = [&](std::size_t r) { return static_cast<char*>(ops[r]->output_data[leaf]) + begin; };
  if (scratch != nullptr) {
    reduce_buffers(dtype, mine.op, inputs, scratch, count, static_cast<std::int64_t>(n));
    for (std::size_t r = 0; r < n; ++r) stream_copy(output(r), scratch, bytes);
    return;
  }
  char* out = output(static_cast<std::size_t>(rank));
  reduce_buffers(dtype, mine.op, inputs, out, count, static_cast<std::int64_t>(n));
  if (copy_later) return;
  for (std::size_t r = 0; r < n; ++r) {
    if (r != static_cast<std::size_t>(rank)) std::memcpy(output(r), out, bytes);
  }
}

// Fetches the part of every replica's pointer arrays that covers leaves [first, last] into this
// core's cache in one go. The other replicas wrote theirs on their own cores just before the
// rendezvous; read one by one, each line would stall the reduction for a cross-core transfer
// (every 8 leaves, for each replica); prefetched, the transfers overlap.
void prefetch_pointers(std::span<CollectiveOp* const> ops, std::size_t first, std::size_t last) {
  constexpr std::size_t kPerLine = kCacheLine / sizeof(void*);
  for (const CollectiveOp* op : ops) {
    for (std::size_t leaf = first; leaf < last + kPerLine; leaf += kPerLine) {
      const std::size_t at = std::min(leaf, last);
      __builtin_prefetch(&op->input_data[at]);
      __builtin_prefetch(&op->output_data[at]);
    }
  }
}

// The staging area holds, from its start: for all_gather, each leaf's size along the gather axis
// (an int64 per leaf); then each leaf's data at a cache-line multiple.
std::size_t staged_header_bytes(const CollectiveOp& op) {
  return op.kind == CollectiveKind::kAllGather ? align_leaf(op.inputs.size() * sizeof(std::int64_t)) : 0;
}

}  // namespace

CpuCommunicator::CpuCommunicator(int size, detail::WaitPolicy policy)
    : done_(size, policy),
      cursors_(new ChunkCursor[static_cast<std::size_t>(size)]),
      scratch_(new Scratch[static_cast<std::size_t>(size)]),
      staging_(new Staging[static_cast<std::size_t>(size)]) {}

const std::byte* CpuCommunicator::staged_inputs(int rank, const CollectiveOp& op) const {
  return staging_[static_cast<std::size_t>(rank)].bytes[op.sequence & 1];
}

void CpuCommunicator::stage(int rank, CollectiveOp& op) {
  op.staged = false;
  if (op.kind != CollectiveKind::kAllReduce && op.kind != CollectiveKind::kAllGather &&
      op.kind != CollectiveKind::kReduceScatter) {
    return;
  }
  // all_reduce, reduce_scatter: the data phase reads leaf k at its leaf_offsets entry (and the
  // list's size needs no pass over its leaves); all_gather: each reader lays the leaves out again
  // from the sizes after the header.
  const bool reduce = op.kind != CollectiveKind::kAllGather;
  std::size_t total = staged_header_bytes(op);
  if (reduce) {
    total = op.leaf_offsets.back();
  } else {
    for (const BufferRef& leaf : op.inputs) total = align_leaf(total) + leaf.nbytes();
  }
  if (total > kStagingBytes) return;
  std::byte* out = staging_[static_cast<std::size_t>(rank)].bytes[op.sequence & 1];
  if (op.kind == CollectiveKind::kAllGather) {
    for (std::size_t leaf = 0; leaf < op.inputs.size(); ++leaf) {
      const Shape& shape = *op.inputs[leaf].shape;
      const std::int64_t dim = shape[gather_axis(op, shape)];
      std::memcpy(out + leaf * sizeof(std::int64_t), &dim, sizeof(dim));
    }
  }
  std::size_t offset = staged_header_bytes(op);
  for (std::size_t leaf = 0; leaf < op.inputs.size(); ++leaf) {
    const BufferRef& in = op.inputs[leaf];
    offset = reduce ? op.leaf_offsets[leaf] : align_leaf(offset);
    if (in.nbytes() != 0) std::memcpy(out + offset, in.data, in.nbytes());
    offset += in.nbytes();
  }
  op.staged = true;
}

void CpuCommunicator::all_reduce(int rank, std::span<CollectiveOp* const> ops) {
  const CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  const std::size_t n = ops.size();
  // Staged (the group made the choice the same on every replica): the other replicas may have
  // returned already, so only this replica's op and the staging areas may be read.
  if (mine.staged) {
    absl::InlinedVector<const void*, 8> inputs(n);
    for (std::size_t leaf = 0; leaf < mine.inputs.size(); ++leaf) {
      for (std::size_t r = 0; r < n; ++r) inputs[r] = staged_inputs(static_cast<int>(r), mine) + mine.leaf_offsets[leaf];
      reduce_buffers(mine.inputs[leaf].dtype, mine.op, inputs, mine.output_data[leaf],
                     mine.inputs[leaf].num_elements(), static_cast<std::int64_t>(n));
    }
    return;
  }
  // Chunks of the leaves laid end to end: their boundaries fall on element boundaries.
  const std::span<const std::size_t> starts = mine.leaf_offsets;
  const std::size_t total = starts.back();
  // Chunks of kChunkBytes, or smaller so that each replica gets at least four: the shares of a
  // small collective then differ by at most a quarter.
  const std::size_t chunk_bytes = std::clamp(align_leaf(total / (4 * n)), kMinChunkBytes, kChunkBytes);
  const std::size_t chunks = (total + chunk_bytes - 1) / chunk_bytes;
  const bool streaming = 2 * n * total > shared_cache_bytes() * 3 / 4;
  std::byte* scratch = streaming ? scratch_[static_cast<std::size_t>(rank)].bytes : nullptr;
  // A chunk of many small leaves then costs one copy per other replica, not one per leaf (the
  // padding between leaves goes along).
  const bool one_block = !streaming && mine.output_block != nullptr;
  const auto share_begin = [&](std::size_t r) { return chunks * r / n; };
  const auto leaf_at = [&](std::size_t byte) {
    return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end() - 1, byte) - starts.begin()) - 1;
  };
  // Its own share first, in order (contiguous for the prefetchers, its counter stays in its
  // cache), then whatever the replicas after it have not claimed yet: replicas that have a core
  // do the work of those waiting for one.
  for (std::size_t step = 0; step < n; ++step) {
    const std::size_t owner = (static_cast<std::size_t>(rank) + step) % n;
    const std::size_t begin = share_begin(owner);
    const std::size_t size = share_begin(owner + 1) - begin;
    std::atomic<std::size_t>& cursor = cursors_[owner].next;
    if (const std::size_t next = cursor.load(std::memory_order_relaxed); next < size) {
      prefetch_pointers(ops, leaf_at((begin + next) * chunk_bytes),
                        leaf_at(std::min((begin + size) * chunk_bytes, total) - 1));
    }
    for (std::size_t i = cursor.fetch_add(1, std::memory_order_relaxed); i < size;
         i = cursor.fetch_add(1, std::memory_order_relaxed)) {
      const std::size_t lo = (begin + i) * chunk_bytes;
      const std::size_t hi = std::min(lo + chunk_bytes, total);
      for (std::size_t leaf = leaf_at(lo); leaf < mine.inputs.size() && starts[leaf] < hi; ++leaf) {
        const std::size_t leaf_begin = std::max(lo, starts[leaf]) - starts[leaf];
        const std::size_t leaf_end = std::min(hi, starts[leaf] + mine.inputs[leaf].nbytes()) - starts[leaf];
        if (leaf_begin < leaf_end) reduce_range(ops, rank, leaf, leaf_begin, leaf_end, scratch, one_block);
      }
      if (one_block) {
        const auto* from = static_cast<const std::byte*>(mine.output_block) + lo;
        for (std::size_t r = 0; r < n; ++r) {
          auto* to = static_cast<std::byte*>(ops[r]->output_block) + lo;
          if (r != static_cast<std::size_t>(rank)) std::memcpy(to, from, hi - lo);
        }
      }
    }
  }
  if (streaming) stream_fence();  // streaming stores are not ordered by the barrier's atomics
  done_.arrive_and_wait_uninterruptible();
  // Nobody claims now: each replica resets its own counter, off the next collective's critical
  // path, and the counter's line goes back to its owner's core until the next replica runs out
  // of work (the next rendezvous orders the reset before every claim).
  cursors_[static_cast<std::size_t>(rank)].next.store(0, std::memory_order_relaxed);
}

void CpuCommunicator::all_gather(int rank, std::span<CollectiveOp* const> ops) {
  CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  const std::size_t n = ops.size();
  absl::InlinedVector<const void*, 8> inputs(n);
  absl::InlinedVector<std::int64_t, 8> dims(n);
  // Staged: as in all_reduce, only this replica's op and the staging areas may be read, and no
  // closing barrier is needed.
  const bool staged = mine.staged;
  absl::InlinedVector<std::size_t, 8> offsets(n, staged_header_bytes(mine));
  // An allocation failure must still reach the barrier, or the other replicas would wait forever.
  std::exception_ptr error;
  for (std::size_t leaf = 0; leaf < mine.inputs.size() && !error; ++leaf) {
    const Shape& shape = *mine.inputs[leaf].shape;
    const int axis = gather_axis(mine, shape);
    std::int64_t total = 0;
    const std::size_t row_bytes = static_cast<std::size_t>(shape.outer_size(axis) * shape.inner_size(axis)) *
                                  dtype_size(mine.inputs[leaf].dtype);
    for (std::size_t r = 0; r < n; ++r) {
      if (staged) {
        const std::byte* area = staged_inputs(static_cast<int>(r), mine);
        std::memcpy(&dims[r], area + leaf * sizeof(std::int64_t), sizeof(std::int64_t));
        offsets[r] = align_leaf(offsets[r]);
        inputs[r] = area + offsets[r];
        offsets[r] += static_cast<std::size_t>(dims[r]) * row_bytes;
      } else {
        inputs[r] = ops[r]->inputs[leaf].data;
        dims[r] = (*ops[r]->inputs[leaf].shape)[axis];
      }
      total += dims[r];
    }
    if (mine.gather_in_place) inputs[static_cast<std::size_t>(rank)] = nullptr;
    try {
      void* out = mine.allocate_output(mine.allocate_context, leaf, shape.with_dim(axis, total));
      concat_buffers(inputs, dims, shape.outer_size(axis),
                     static_cast<std::size_t>(shape.inner_size(axis)) * dtype_size(mine.inputs[leaf].dtype), out);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (!staged) done_.arrive_and_wait_uninterruptible();
  if (error) std::rethrow_exception(error);
}

void CpuCommunicator::reduce_scatter(int rank, std::span<CollectiveOp* const> ops) {
  const CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  const std::size_t n = ops.size();
  // Staged: as in all_reduce, only this replica's op and the staging areas may be read, and no
  // closing barrier is needed.
  const bool staged = mine.staged;
  absl::InlinedVector<const void*, 8> inputs(n);
  for (std::size_t leaf = 0; leaf < mine.inputs.size(); ++leaf) {
    const BufferRef& in = mine.inputs[leaf];
    const Shard shard = shard_of(in.num_elements(), static_cast<std::int64_t>(n), rank);
    const std::size_t offset = static_cast<std::size_t>(shard.begin) * dtype_size(in.dtype);
    for (std::size_t r = 0; r < n; ++r) {
      inputs[r] = (staged ? staged_inputs(static_cast<int>(r), mine) + mine.leaf_offsets[leaf]
                          : static_cast<const std::byte*>(ops[r]->input_data[leaf])) +
                  offset;
    }
    reduce_buffers(in.dtype, mine.op, inputs, mine.output_data[leaf], shard.size, static_cast<std::int64_t>(n));
  }
  if (!staged) done_.arrive_and_wait_uninterruptible();  // no replica's inputs go while another reads them
}

}  // namespace distribute::collective::cpu
