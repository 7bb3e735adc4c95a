// SmallAllReduce: posting a line, waiting for the peers', reducing the payloads.
#include "replica/small_all_reduce.h"

#include <cstring>

#include "absl/container/inlined_vector.h"
#include "device/kernels.h"

namespace distribute::detail {
namespace {

constexpr std::size_t kLeafAlignment = 8;

std::size_t align_leaf(std::size_t offset) { return (offset + kLeafAlignment - 1) / kLeafAlignment * kLeafAlignment; }

}  // namespace

SmallAllReduce::SmallAllReduce(int size) : size_(size), lines_(std::make_unique<Lines[]>(static_cast<std::size_t>(size))) {}

bool SmallAllReduce::post(int rank, const CollectiveCall& call) {
  Line& mine = lines_[static_cast<std::size_t>(rank)].line[call.op.sequence & 1];
  bool eligible = call.op.kind == collective::CollectiveKind::kAllReduce ||
                  call.op.kind == collective::CollectiveKind::kReduceScatter;
  std::size_t offset = 0;
  for (const collective::BufferRef& in : call.op.inputs) {
    if (!eligible) break;
    offset = align_leaf(offset);
    const std::size_t nbytes = in.nbytes();
    eligible = offset + nbytes <= kPayloadBytes;
    if (eligible && nbytes != 0) std::memcpy(mine.payload + offset, in.data, nbytes);
    offset += nbytes;
  }
  Lines& own = lines_[static_cast<std::size_t>(rank)];
  own.digest = call.signature;
  mine.digest = own.digest;
  // seq_cst, with the load of sleepers after it: either a sleeping peer sees this line when it
  // checks again, or this post sees the sleeper and wakes it.
  mine.tag.store(tag_of(rank, call.op.sequence, eligible), std::memory_order_seq_cst);
  if (mail_.sleepers.load(std::memory_order_seq_cst) != 0) mail_.bump_and_wake_all();
  return eligible;
}

bool SmallAllReduce::all_posted(int rank, std::int64_t sequence) const {
  for (int r = 0; r < size_; ++r) {
    if (r != rank && !has_posted(r, rank, sequence)) return false;
  }
  return true;
}

std::vector<int> SmallAllReduce::behind(int rank, std::int64_t sequence) const {
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (!has_posted(r, rank, sequence)) missing.push_back(r);
  }
  return missing;
}

SmallAllReduce::Outcome SmallAllReduce::reduce(int rank, const CollectiveCall& call) const {
  // Rank's own line is not read back: a peer reading it may have taken it from this core, and
  // its contents are the call's inputs and the digest kept beside the epoch.
  const std::int64_t sequence = call.op.sequence;
  const std::uint64_t eligible = tag_of(rank, sequence, true);
  const std::uint64_t digest = lines_[static_cast<std::size_t>(rank)].digest;
  for (int r = 0; r < size_; ++r) {
    if (r == rank) continue;
    const Line& peer = line(r, sequence);
    if (peer.tag.load(std::memory_order_acquire) != eligible || peer.digest != digest) return Outcome::kMismatch;
  }
  // reduce_scatter: only rank's shard of each leaf (the group is one process's, so rank is the
  // replica id).
  const bool scatter = call.op.kind == collective::CollectiveKind::kReduceScatter;
  absl::InlinedVector<const void*, 8> inputs(static_cast<std::size_t>(size_));
  std::size_t offset = 0;
  for (std::size_t leaf = 0; leaf < call.op.inputs.size(); ++leaf) {
    const collective::BufferRef& in = call.op.inputs[leaf];
    offset = align_leaf(offset);
    const Shard shard = scatter ? shard_of(in.num_elements(), size_, rank) : Shard{0, in.num_elements()};
    const std::size_t skip = static_cast<std::size_t>(shard.begin) * dtype_size(in.dtype);
    for (int r = 0; r < size_; ++r) inputs[static_cast<std::size_t>(r)] = line(r, sequence).payload + offset + skip;
    inputs[static_cast<std::size_t>(rank)] = static_cast<const std::byte*>(in.data) + skip;
    reduce_buffers(in.dtype, call.op.op, inputs, call.op.output_data[leaf], shard.size, size_);
    offset += in.nbytes();
  }
  return Outcome::kDone;
}

}  // namespace distribute::detail
