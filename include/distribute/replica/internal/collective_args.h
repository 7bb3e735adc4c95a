// distribute::detail, not API: the bridge from a nest to a CollectiveCall. Flattens the leaves of a value
// into input BufferRefs (scalars point at the caller's value, tensors at their storage), makes
// the outputs (tensors from the replica device's pool, scalars in an inline slot), and rebuilds a
// nest of the same structure from the outputs. On a GPU replica every leaf is device memory:
// scalars are copied to the device with the tensors' inputs and back when the nest is rebuilt, so
// a backend sees one kind of memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "distribute/device/internal/tensor_views.h"
#include "distribute/device/tensor.h"
#include "distribute/nest/nest.h"
#include "distribute/replica/internal/collective_call.h"

namespace distribute::detail {

// Shape of every scalar leaf (docs/performance.md, "Hot-path notes").
inline const Shape kScalarShape;
inline const Shape& scalar_shape() { return kScalarShape; }

// The per-leaf arrays of one collective. A thread keeps those of its last collective for the
// next (see LeafArraysLease): a training loop's gradient list then allocates nothing per step
// for its bookkeeping, and arrays of the same length are not even resized.
struct LeafArrays {
  std::vector<collective::BufferRef> inputs;
  // all_reduce: the inputs' data pointers, then the outputs'.
  std::vector<void*> data_pointers;
  std::vector<std::size_t> leaf_offsets;  // all_reduce: see CollectiveCall::leaf_offsets
};

// Holds a LeafArrays taken from this thread's spare (or a new one when a collective on this
// thread holds the spare) and makes it the spare again when destroyed.
class LeafArraysLease {
 public:
  LeafArraysLease();
  LeafArraysLease(const LeafArraysLease&) = delete;
  LeafArraysLease& operator=(const LeafArraysLease&) = delete;
  ~LeafArraysLease();

  LeafArrays& operator*() const { return *arrays_; }

 private:
  std::unique_ptr<LeafArrays> arrays_;
};

class CollectiveArgs {
 public:
  // kind: kAllReduce, kAllGather or kReduceScatter.
  template <class V>
  CollectiveArgs(const V& value, collective::CollectiveKind kind, const Device& device);
  CollectiveArgs(const CollectiveArgs&) = delete;
  CollectiveArgs& operator=(const CollectiveArgs&) = delete;

  CollectiveCall& call() { return call_; }
  std::size_t size() const { return inputs_.size(); }

  // all_reduce: outputs shaped like the inputs, allocated before the rendezvous.
  void allocate_outputs_like_inputs();
  // all_reduce in place: the outputs are the inputs (every leaf must be a tensor).
  void use_inputs_as_outputs();
  // all_reduce: every leaf is a tensor, so every output is a view of the output block and
  // rebuild() reads no output data: it may run before the data phase.
  bool outputs_are_views() const { return tensor_leaves_ == inputs_.size(); }
  // all_gather: checks every leaf has rank >= 1 and `axis` fits it; outputs are allocated later.
  void prepare_gather(int axis);
  // all_gather in place (CollectiveOp::gather_in_place): output k is `wholes[k]`, which already
  // holds this replica's input k at its place; the caller keeps `wholes` alive.
  void gather_into(std::span<const Tensor> wholes);
  // reduce_scatter: every leaf must be a tensor; output k is a rank-1 tensor of replica
  // `replica`'s shard (among `replicas`) of leaf k.
  void allocate_shard_outputs(int replica, int replicas);

  // The value with the same structure as `value` holding the outputs.
  template <class V>
  V rebuild(const V& value);

 private:
  // Writes leaf's BufferRef to `in` (field by field: docs/performance.md, "Hot-path notes").
  template <class L>
  void fill_input(const L& leaf, std::size_t index, collective::BufferRef& in);
  [[noreturn]] void throw_wrong_device(const Tensor& t, std::size_t leaf) const;
  void* allocate_output(std::size_t leaf, const Shape& shape);
  // A scalar leaf held in host memory (every scalar on a host replica, none on a GPU replica).
  bool host_scalar(const collective::BufferRef& in) const {
    return in.shape == &scalar_shape() && device_.is_cpu();
  }
  // On a GPU replica: the scalar's value in device memory.
  const void* scalar_on_device(const void* value, DType dtype);

  const char* method_;
  Device device_;
  CollectiveCall call_;
  LeafArraysLease arrays_;
  std::vector<collective::BufferRef>& inputs_ = (*arrays_).inputs;
  // Counted while flattening: the tensors, the host scalars, and the bytes of the all_reduce
  // output block (every leaf laid out as CollectiveCall::leaf_offsets says, the host scalars'
  // places left unused).
  std::size_t tensor_leaves_ = 0;
  std::size_t host_scalars_ = 0;
  std::size_t block_bytes_ = 0;
  // all_reduce: every output in device memory is a view of this one block (a gradient list costs
  // one allocation, not one per tensor).
  StorageRef block_;
  absl::InlinedVector<Tensor, 4> tensors_;  // all_gather, reduce_scatter: the output tensors
  std::span<const Tensor> gather_into_;     // all_gather in place: the outputs
  absl::InlinedVector<Tensor, 2> device_scalars_;  // GPU replica: the scalar inputs on the device
  absl::InlinedVector<std::array<std::byte, 8>, 4> scalars_;  // all_reduce: host scalar outputs, in order
  std::vector<void*>& data_pointers_ = (*arrays_).data_pointers;
  std::vector<std::size_t>& leaf_offsets_ = (*arrays_).leaf_offsets;
};

template <class V>
CollectiveArgs::CollectiveArgs(const V& value, collective::CollectiveKind kind, const Device& device)
    : method_(collective::kind_name(kind)), device_(device) {
  call_.op.kind = kind;
  const std::size_t n = nest::num_leaves(value);
  inputs_.resize(n);
  data_pointers_.resize(2 * n);
  leaf_offsets_.resize(n + 1);
  collective::BufferRef* inputs = inputs_.data();
  void** input_data = data_pointers_.data();
  std::size_t* offsets = leaf_offsets_.data();
  const bool digest = kind != collective::CollectiveKind::kAllGather;  // all_gather's: prepare_gather
  LeafDigest leaves;
  std::size_t index = 0;
  std::size_t bytes = 0;
  nest::for_each_leaf(value, [&](const auto& leaf) {
    collective::BufferRef& in = inputs[index];
    fill_input(leaf, index, in);
    input_data[index] = const_cast<void*>(in.data);  // one array for inputs and outputs
    offsets[index] = bytes = collective::align_leaf(bytes);
    bytes += in.nbytes();
    if (digest) leaves.add(in.dtype, in.shape->span(), -1);
    ++index;
  });
  offsets[n] = block_bytes_ = bytes;
  call_.leaf_digest = leaves.value();
  call_.op.inputs = inputs_;
  call_.op.input_data = {data_pointers_.data(), n};
  call_.op.leaf_offsets = leaf_offsets_;
  call_.structure_hash = nest::structure_hash(value);
  call_.describe_structure = [](const void* v) { return nest::describe_structure(*static_cast<const V*>(v)); };
  call_.value = &value;
  call_.op.allocate_output = [](void* self, std::size_t leaf, const Shape& shape) {
    return static_cast<CollectiveArgs*>(self)->allocate_output(leaf, shape);
  };
  call_.op.allocate_context = this;
}

template <class L>
void CollectiveArgs::fill_input(const L& leaf, std::size_t index, collective::BufferRef& in) {
  if constexpr (std::same_as<L, Tensor>) {
    // Host memory is one space, so any CPU tensor serves a CPU replica; a GPU replica needs its own.
    if (!leaf.defined() || !(device_.is_cpu() ? leaf.device().is_cpu() : leaf.device() == device_)) {
      throw_wrong_device(leaf, index);
    }
    in.data = leaf.raw_data();
    in.shape = &leaf.shape();
    in.dtype = leaf.dtype();
    ++tensor_leaves_;
  } else {
    in.data = device_.is_cpu() ? static_cast<const void*>(&leaf) : scalar_on_device(&leaf, dtype_v<L>);
    in.shape = &scalar_shape();
    in.dtype = dtype_v<L>;
    if (device_.is_cpu()) ++host_scalars_;
  }
}

template <class V>
V CollectiveArgs::rebuild(const V& value) {
  std::size_t i = 0;
  const std::size_t n = inputs_.size();
  // all_reduce: every tensor leaf is a view of the block.
  TensorViews views(block_, block_ ? tensor_leaves_ : 0);
  return nest::map_leaves(value, [&](const auto& leaf) {
    using L = std::decay_t<decltype(leaf)>;
    const std::size_t k = i++;
    if constexpr (std::same_as<L, Tensor>) {
      if (!block_) return std::move(tensors_[k]);
      return views.make(leaf_offsets_[k], inputs_[k].dtype, *inputs_[k].shape);
    } else {
      L out;
      copy_bytes(&out, Device::cpu(), data_pointers_[n + k], device_, sizeof(L));
      return out;
    }
  });
}

}  // namespace distribute::detail
