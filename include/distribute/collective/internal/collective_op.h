// distribute::collective, not API: what one replica brings to one collective, as buffers. The
// collective layer moves data between replicas and knows nothing of nests, PerReplica or
// merge_fn: the replica layer (replica/internal/collective_call.h) flattens a nest into a
// CollectiveOp, checks that every replica's ops match, and only then hands them to a backend's
// Communicator (src/collective/communicator.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "distribute/collective/communication_options.h"
#include "distribute/collective/shard.h"
#include "distribute/device/device.h"
#include "distribute/device/dtype.h"
#include "distribute/device/reduce_op.h"
#include "distribute/device/shape.h"

namespace distribute::collective {

// kMergeCall and kReturn move no data: the replicas only meet (to run a merge_fn once, and when a
// replica's fn returns). kReduceTo, kGatherTo and kBroadcastTo are the steps across workers of the
// cross-replica reduce and gather (Strategy::reduce, extended().reduce_to, ...) and of the first
// worker's value reaching the others (a variable's ONLY_FIRST_REPLICA or NONE update), which no
// backend sees. kCheckpoint moves no data either: the workers agree on a checkpoint operation
// (its method and entries) before the chief reads or writes a file.
enum class CollectiveKind : std::uint8_t {
  kAllReduce,
  kAllGather,
  kMergeCall,
  kReturn,
  kReduceTo,
  kGatherTo,
  kBroadcastTo,
  kReduceScatter,
  kCheckpoint
};

// "all_reduce", "all_gather", "merge_call", "return", "cross-replica reduce", "cross-replica gather",
// "cross-replica broadcast", "reduce_scatter", "checkpoint".
const char* kind_name(CollectiveKind kind);

// One input leaf: `shape` elements of `dtype` at `data`, in the replica device's memory (host
// memory on a CPU replica, whatever CPU device a tensor names). 24 bytes: one is written per leaf
// per collective.
struct BufferRef {
  const void* data = nullptr;
  const Shape* shape = nullptr;
  DType dtype = DType::kFloat32;

  std::int64_t num_elements() const { return shape->num_elements(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(num_elements()) * dtype_size(dtype); }
};

// A replica's value in a cross-replica operation: `data` on `device`.
struct DeviceBuffer {
  const void* data = nullptr;
  Device device;
};

// Where a leaf laid after `offset` bytes of others starts: the next cache-line multiple, so that
// no two leaves share a line and every line boundary is an element boundary of every dtype. The
// one layout rule of leaf_offsets, all_reduce output blocks and the CPU backend's chunks and
// staging areas.
inline std::size_t align_leaf(std::size_t offset) { return (offset + 63) / 64 * 64; }

struct CollectiveOp {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  ReduceOp op = ReduceOp::kSum;  // all_reduce, reduce_scatter
  int axis = 0;                  // all_gather, as the caller gave it (negative counts from the end)
  std::span<const BufferRef> inputs;
  // all_reduce, reduce_scatter: the inputs' data pointers again, end to end (for a backend that
  // reads other replicas' pointers leaf by leaf), and the outputs' (all_reduce: output leaf k has input leaf k's dtype and shape, in the replica
  // device's memory; it may be input leaf k itself, for an in-place all_reduce; reduce_scatter:
  // output leaf k holds the replica's shard of leaf k's elements).
  std::span<const void* const> input_data;
  std::span<void* const> output_data;
  // all_reduce, reduce_scatter: where each input leaf starts when the leaves are laid end to end, each from a
  // cache-line multiple (align_leaf), then the total. The same on every replica once the replicas'
  // ops have matched.
  std::span<const std::size_t> leaf_offsets;
  // all_reduce, when not null: every output leaf lies in this one block at its leaf_offsets
  // entry (the replicas' blocks then share one layout, and a run of small leaves can be copied
  // between them in one go).
  void* output_block = nullptr;
  // The call's options merged with the strategy's defaults.
  CommunicationOptions options;
  // all_gather: allocate_output(allocate_context, leaf, shape) allocates output `leaf` with
  // `shape` on the replica's own thread, once the gathered shapes are known, and returns its data.
  void* (*allocate_output)(void* allocate_context, std::size_t leaf, const Shape& shape) = nullptr;
  void* allocate_context = nullptr;
  // all_gather in place (every leaf rank 1, gathered along axis 0): the output allocate_output
  // gives already holds this replica's input at its place (the input is a view of it), so a
  // backend need not copy that part, and must not write it while another replica may read it as
  // its input (the shared-memory backends skip it; NCCL's broadcast from it is in place).
  bool gather_in_place = false;
  // This replica's count of collectives in the current run, from 1.
  std::int64_t sequence = 0;
  // Set by the backend's stage(), then made equal on every replica before the data phase: every
  // replica's inputs were copied where the data phase reads them.
  bool staged = false;
};

// The axis an all_gather or gather_to `op` gathers a leaf of `shape` along, from 0: op.axis is the
// caller's, checked already, and may count from the end.
inline int gather_axis(const CollectiveOp& op, const Shape& shape) {
  return op.axis < 0 ? op.axis + shape.rank() : op.axis;
}

// "all_reduce #3".
std::string op_name(const CollectiveOp& op);

// "replica 1" or "replicas 0, 2, 3".
std::string replicas_text(const std::vector<int>& replicas);

}  // namespace distribute::collective
