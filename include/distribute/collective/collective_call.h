// CollectiveCall: what one replica brings to one collective, type-erased so that the collective
// layer works on buffers and knows nothing of nests or PerReplica. The replica layer fills it;
// the group compares the replicas' calls field by field (the collective fingerprint) before any
// data moves, and a backend moves the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "distribute/collective/communication_options.h"
#include "distribute/collective/reduce_op.h"
#include "distribute/device/dtype.h"
#include "distribute/device/shape.h"

namespace distribute::collective {

enum class CollectiveKind : std::uint8_t { kAllReduce, kAllGather, kMergeCall, kReturn };

// "all_reduce", "all_gather", "merge_call", "return".
const char* kind_name(CollectiveKind kind);

// One input leaf: `shape` elements of `dtype` at `data`, in the replica device's memory (host
// memory on a CPU replica, whatever CPU device a tensor names). 24 bytes: one is written per leaf
// per collective.
struct BufferRef {
  void* data = nullptr;
  const Shape* shape = nullptr;
  DType dtype = DType::kFloat32;

  std::int64_t num_elements() const { return shape->num_elements(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(num_elements()) * dtype_size(dtype); }
};

struct CollectiveCall;

// Where a leaf laid after `offset` bytes of others starts: the next cache-line multiple, so that
// no two leaves share a line and every line boundary is an element boundary of every dtype. The
// one layout rule of leaf_offsets, all_reduce output blocks and the CPU backend's chunks and
// staging areas.
inline std::size_t align_leaf(std::size_t offset) { return (offset + 63) / 64 * 64; }

// Builds CollectiveCall::leaf_digest from the leaves in order. Each leaf is a word holding its
// dtype, its rank and, for all_gather, the gather axis (so that no leaf's dimensions can read as
// the start of another leaf), then its dimensions (all_gather: the gather axis's size left out,
// as the replicas may differ there). Leaf k goes into lane k % 4, so that a hundred leaves make
// four short chains of dependent multiplications rather than one long one; the lanes, mixed to
// full avalanche, make the digest. Equal leaves give equal digests; different leaves give equal
// digests only by a collision of 64-bit hashes, as for a nest's structure_hash.
class LeafDigest {
 public:
  void add(DType dtype, std::span<const std::int64_t> dims, int gather_axis) {
    std::uint64_t& lane = lanes_[leaves_++ % kLanes];
    lane = mix(lane, static_cast<std::uint64_t>(dtype) | std::uint64_t{dims.size()} << 8 |
                         static_cast<std::uint64_t>(gather_axis + 1) << 40);
    for (std::size_t d = 0; d < dims.size(); ++d) {
      lane = mix(lane, static_cast<int>(d) == gather_axis ? 0 : static_cast<std::uint64_t>(dims[d]));
    }
  }
  std::uint64_t value() const {
    std::uint64_t h = leaves_;
    for (std::uint64_t lane : lanes_) h = avalanche(h ^ avalanche(lane));
    return h;
  }

 private:
  static constexpr std::size_t kLanes = 4;
  static constexpr std::uint64_t kMultiplier = 0x9e3779b97f4a7c15;  // odd: a bijection mod 2^64
  // One word into a lane: the multiplication spreads each bit upwards, the shift brings the high
  // half back down, so a difference anywhere in a word reaches every later bit.
  static std::uint64_t mix(std::uint64_t lane, std::uint64_t word) {
    const std::uint64_t h = (lane ^ word) * kMultiplier;
    return h ^ (h >> 32);
  }
  // SplitMix64's finaliser: every input bit flips each output bit with probability about 1/2.
  static std::uint64_t avalanche(std::uint64_t h) {
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9;
    h = (h ^ (h >> 27)) * 0x94d049bb133111eb;
    return h ^ (h >> 31);
  }
  std::uint64_t lanes_[kLanes] = {0x243f6a8885a308d3, 0x13198a2e03707344, 0xa4093822299f31d0, 0x082efa98ec4e6c89};
  std::uint64_t leaves_ = 0;
};

// Runs a merge_fn once for all replicas (calls[r] is replica r's call) and returns its result.
using MergeRunner = std::shared_ptr<void> (*)(std::span<CollectiveCall* const> calls);

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  ReduceOp op = ReduceOp::kSum;  // all_reduce
  int axis = 0;                  // all_gather, already normalised
  std::span<const BufferRef> inputs;
  // Every input leaf's dtype and shape in one LeafDigest, made on the replica's own thread while
  // it visits the leaves: the replica that completes the rendezvous compares one word per peer,
  // and no per-leaf array is written on one core to be read on another.
  std::uint64_t leaf_digest = 0;
  // all_reduce: the inputs' data pointers again, end to end (a backend that reads other replicas'
  // pointers leaf by leaf then touches a cache line per 8 leaves, not per 3), and the outputs'
  // (output leaf k has input leaf k's dtype and shape, in the replica device's memory).
  std::span<const void* const> input_data;
  std::span<void* const> output_data;
  // all_reduce: where each input leaf starts when the leaves are laid end to end, each from a
  // cache-line multiple (no two share a line, and a line boundary is an element boundary of every
  // dtype), then the total. The same on every replica once the leaf digests match.
  std::span<const std::size_t> leaf_offsets;
  // all_reduce, when not null: every output leaf lies in this one block at its leaf_offsets
  // entry (the replicas' blocks then share one layout, and a run of small leaves can be copied
  // between them in one go).
  void* output_block = nullptr;
  // The nest's structure: its hash is compared; describe(value) renders it for messages.
  std::uint64_t structure_hash = 0;
  std::string (*describe_structure)(const void* value) = nullptr;
  const void* value = nullptr;
  CommunicationOptions options;
  // all_gather: allocate_output(allocate_context, leaf, shape) allocates output `leaf` with
  // `shape` on the replica's own thread, after the rendezvous, and returns its data.
  void* (*allocate_output)(void* allocate_context, std::size_t leaf, const Shape& shape) = nullptr;
  void* allocate_context = nullptr;
  // merge_call: identifies merge_fn's type and arguments' types; `frame` is read by `run_merge`.
  const void* merge_type = nullptr;
  const void* frame = nullptr;
  MergeRunner run_merge = nullptr;
  // Set by the group: this replica's count of collectives in the current run, from 1.
  std::int64_t sequence = 0;
  // Set by the backend's stage(): the inputs were copied where the data phase reads them.
  bool staged = false;
  // When set: work of this replica's own that needs neither the other replicas nor the data
  // (making an all_reduce's result, tensors viewing the output block), run once with
  // `while_waiting_context` as soon as the replica has arrived at the rendezvous, so that it
  // fills the wait for the others. Must not throw.
  void (*while_waiting)(void* context) = nullptr;
  void* while_waiting_context = nullptr;
};

// "all_reduce #3".
std::string call_name(const CollectiveCall& call);

}  // namespace distribute::collective
