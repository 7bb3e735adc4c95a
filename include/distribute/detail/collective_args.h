// distribute::detail: the bridge from a nest to a CollectiveCall. Flattens the leaves of a value
// into input BufferRefs (scalars point at the caller's value, tensors at their storage), makes
// the outputs (tensors from the replica device's pool, scalars in an inline slot), and rebuilds a
// nest of the same structure from the outputs. On a GPU replica every leaf is device memory:
// scalars are copied to the device with the tensors' inputs and back when the nest is rebuilt, so
// a backend sees one kind of memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "distribute/collective/collective_call.h"
#include "distribute/device/tensor.h"
#include "distribute/nest/nest.h"

namespace distribute::detail {

// Shape of every scalar leaf. Inline and constant-initialised: asked for once per leaf.
inline const Shape& scalar_shape() {
  static constinit const Shape shape;
  return shape;
}

class CollectiveArgs {
 public:
  template <class V>
  CollectiveArgs(const V& value, const char* method, const Device& device);
  CollectiveArgs(const CollectiveArgs&) = delete;
  CollectiveArgs& operator=(const CollectiveArgs&) = delete;

  collective::CollectiveCall& call() { return call_; }
  std::size_t size() const { return inputs_.size(); }

  // all_reduce: outputs shaped like the inputs, allocated before the rendezvous.
  void allocate_outputs_like_inputs();
  // all_gather: checks every leaf has rank >= 1 and `axis` fits it; outputs are allocated later.
  void prepare_gather(int axis);

  // The value with the same structure as `value` holding the outputs.
  template <class V>
  V rebuild(const V& value);

 private:
  template <class L>
  void add_input(const L& leaf);
  void check_device(const Tensor& t, std::size_t leaf) const;
  void* allocate_output(std::size_t leaf, const Shape& shape);
  // Sizes the signature for every leaf and returns where its first word goes.
  std::int64_t* size_signature();
  // Writes leaf's dtype and shape to the signature at `out` (gather_axis >= 0 for all_gather)
  // and returns where the next leaf's go.
  std::int64_t* sign_leaf(std::int64_t* out, std::size_t leaf, int gather_axis);
  // A scalar leaf held in host memory (every scalar on a host replica, none on a GPU replica).
  bool host_scalar(std::size_t leaf) const {
    return inputs_[leaf].shape == &scalar_shape() && inputs_[leaf].device.is_cpu();
  }
  // On a GPU replica: the scalar's value in device memory.
  const void* scalar_on_device(const void* value, DType dtype);

  const char* method_;
  Device device_;
  collective::CollectiveCall call_;
  absl::InlinedVector<collective::BufferRef, 4> inputs_;
  absl::InlinedVector<collective::BufferRef, 4> outputs_;
  // all_reduce: every output in device memory is a view of this one block, from a cache-line
  // multiple (a gradient list costs one allocation, not one per tensor).
  std::shared_ptr<Storage> block_;
  absl::InlinedVector<Tensor, 4> tensors_;  // all_gather: the output tensors
  absl::InlinedVector<Tensor, 2> device_scalars_;  // GPU replica: the scalar inputs on the device
  absl::InlinedVector<std::array<std::byte, 8>, 4> scalars_;  // all_reduce: host scalar outputs, in order
  absl::InlinedVector<std::int64_t, 8> signature_;
  // all_reduce: the inputs' data pointers, then the outputs' (one allocation for both).
  absl::InlinedVector<void*, 8> data_pointers_;
};

template <class V>
CollectiveArgs::CollectiveArgs(const V& value, const char* method, const Device& device)
    : method_(method), device_(device) {
  const std::size_t n = nest::num_leaves(value);
  inputs_.reserve(n);
  outputs_.reserve(n);
  nest::for_each_leaf(value, [this](const auto& leaf) { add_input(leaf); });
  call_.inputs = inputs_;
  call_.structure_hash = nest::structure_hash(value);
  call_.describe_structure = [](const void* v) { return nest::describe_structure(*static_cast<const V*>(v)); };
  call_.value = &value;
  call_.allocate_output = [](void* self, std::size_t leaf, const Shape& shape) {
    return static_cast<CollectiveArgs*>(self)->allocate_output(leaf, shape);
  };
  call_.allocate_context = this;
}

template <class L>
void CollectiveArgs::add_input(const L& leaf) {
  if constexpr (std::same_as<L, Tensor>) {
    check_device(leaf, inputs_.size());
    inputs_.push_back({leaf.raw_data(), leaf.dtype(), &leaf.shape(), leaf.device()});
  } else if (device_.is_cpu()) {
    inputs_.push_back({const_cast<L*>(&leaf), dtype_v<L>, &scalar_shape(), Device::cpu()});
  } else {
    inputs_.push_back({const_cast<void*>(scalar_on_device(&leaf, dtype_v<L>)), dtype_v<L>, &scalar_shape(), device_});
  }
}

template <class V>
V CollectiveArgs::rebuild(const V& value) {
  std::size_t i = 0;
  return nest::map_leaves(value, [&](const auto& leaf) {
    using L = std::decay_t<decltype(leaf)>;
    const std::size_t k = i++;
    if constexpr (std::same_as<L, Tensor>) {
      if (block_ == nullptr) return std::move(tensors_[k]);
      const auto* base = static_cast<const std::byte*>(block_->data());
      const auto* data = static_cast<const std::byte*>(outputs_[k].data);
      return tensor_view(block_, base != nullptr ? static_cast<std::size_t>(data - base) : 0, outputs_[k].dtype,
                         *outputs_[k].shape);
    } else {
      L out;
      copy_bytes(&out, Device::cpu(), outputs_[k].data, outputs_[k].device, sizeof(L));
      return out;
    }
  });
}

}  // namespace distribute::detail
