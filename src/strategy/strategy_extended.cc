#include "distribute/strategy/strategy_extended.h"

#include <algorithm>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "device/kernels.h"
#include "distribute/strategy/strategy.h"

namespace distribute {
namespace detail {
namespace {

void check_components(std::span<const Tensor> components, const char* what) {
  DISTRIBUTE_CHECK(!components.empty(), InvalidArgumentError, what, ": no values to combine");
  const Tensor& first = components[0];
  for (std::size_t r = 0; r < components.size(); ++r) {
    const Tensor& t = components[r];
    DISTRIBUTE_CHECK(t.defined(), InvalidArgumentError, what, ": the value of replica ", r, " is an undefined Tensor");
    DISTRIBUTE_CHECK(t.dtype() == first.dtype(), InvalidArgumentError, what, ": replica ", r, " has dtype ",
                     dtype_name(t.dtype()), " but replica 0 has ", dtype_name(first.dtype()));
    DISTRIBUTE_CHECK(t.rank() == first.rank(), InvalidArgumentError, what, ": replica ", r, " has shape ",
                     t.shape().to_string(), " but replica 0 has ", first.shape().to_string(),
                     "; the ranks must agree");
  }
}

void check_same_except(std::span<const Tensor> components, std::optional<int> axis, const char* what,
                       const char* rule) {
  const Shape& first = components[0].shape();
  for (std::size_t r = 1; r < components.size(); ++r) {
    const Shape& shape = components[r].shape();
    for (int d = 0; d < first.rank(); ++d) {
      DISTRIBUTE_CHECK((axis && d == *axis) || shape[d] == first[d], InvalidArgumentError, what, ": replica ", r,
                       " has shape ", shape.to_string(), " but replica 0 has ", first.to_string(), "; ", rule);
    }
  }
}

// Cross-replica operations run on one thread with the host kernels: values on a GPU are copied to
// the host first and the result is moved to a GPU destination. (Replicas' collectives, which is
// where a training step spends its time, go through the GPU backends instead.)
bool involves_gpu(std::span<const Tensor> components, const Device& destination) {
  return destination.is_gpu() ||
         std::any_of(components.begin(), components.end(), [](const Tensor& t) { return t.device().is_gpu(); });
}

std::vector<Tensor> host_copies(std::span<const Tensor> components) {
  std::vector<Tensor> out;
  out.reserve(components.size());
  for (const Tensor& t : components) out.push_back(t.device().is_cpu() ? t : t.to(Device::cpu()));
  return out;
}

}  // namespace

Tensor reduce_components(ReduceOp op, std::span<const Tensor> components, std::optional<int> axis,
                         const Device& destination, const char* what) {
  check_components(components, what);
  if (involves_gpu(components, destination)) {
    return reduce_components(op, host_copies(components), axis, Device::cpu(), what).to(destination);
  }
  const DType dtype = components[0].dtype();
  absl::InlinedVector<const void*, 8> inputs;
  if (!axis) {
    check_same_except(components, std::nullopt, what,
                      "with axis=None the shapes must be equal (pass an axis to also reduce along it)");
    for (const Tensor& t : components) inputs.push_back(t.raw_data());
    Tensor out = Tensor::empty(dtype, components[0].shape(), destination);
    detail::reduce_buffers(dtype, op, inputs, out.raw_data(), out.num_elements(),
                               static_cast<std::int64_t>(components.size()));
    return out;
  }
  const int a = normalize_axis(*axis, components[0].rank(), what);
  check_same_except(components, a, what, "the shapes may differ only along axis");
  const Shape reduced = components[0].shape().without_dim(a);
  std::vector<Tensor> partial;
  std::int64_t count = 0;
  for (const Tensor& t : components) {
    partial.push_back(Tensor::empty(dtype, reduced, destination));
    detail::sum_over_axis(dtype, t.raw_data(), t.shape().outer_size(a), t.shape()[a], t.shape().inner_size(a),
                              partial.back().raw_data());
    inputs.push_back(partial.back().raw_data());
    count += t.shape()[a];
  }
  Tensor out = Tensor::empty(dtype, reduced, destination);
  // MEAN divides by the number of elements reduced, not the number of replicas, so uneven
  // per-replica batches weigh correctly.
  detail::reduce_buffers(dtype, op, inputs, out.raw_data(), out.num_elements(), std::max<std::int64_t>(count, 1));
  return out;
}

Tensor concat_components(std::span<const Tensor> components, int axis, const Device& destination, const char* what) {
  check_components(components, what);
  if (involves_gpu(components, destination)) {
    return concat_components(host_copies(components), axis, Device::cpu(), what).to(destination);
  }
  DISTRIBUTE_CHECK(components[0].rank() > 0, InvalidArgumentError, what,
                   ": the values have rank 0 (scalars); gathering needs rank >= 1, reshape them to shape (1,) first");
  const int a = normalize_axis(axis, components[0].rank(), what);
  check_same_except(components, a, what, "the shapes may differ only along axis");
  absl::InlinedVector<const void*, 8> inputs;
  absl::InlinedVector<std::int64_t, 8> dims;
  std::int64_t total = 0;
  for (const Tensor& t : components) {
    inputs.push_back(t.raw_data());
    dims.push_back(t.shape()[a]);
    total += t.shape()[a];
  }
  const Shape& shape = components[0].shape();
  Tensor out = Tensor::empty(components[0].dtype(), shape.with_dim(a, total), destination);
  detail::concat_buffers(inputs, dims, shape.outer_size(a),
                             static_cast<std::size_t>(shape.inner_size(a)) * dtype_size(components[0].dtype()),
                             out.raw_data());
  return out;
}

}  // namespace detail

StrategyExtended::StrategyExtended(Strategy& container, std::vector<Device> devices,
                                   CommunicationOptions default_options)
    : container_(container), worker_devices_(std::move(devices)), default_options_(default_options) {}

void StrategyExtended::require_cross_replica_or_default(const char* method, const char* hint) const {
  detail::require_cross_replica_or_default(container_, method, hint);
}

Tensor StrategyExtended::reduce_to(ReduceOp op, const DistributedValues<Tensor>& value, const Device& destination,
                                   const CommunicationOptions&) {
  require_cross_replica_or_default("extended().reduce_to");
  return detail::reduce_components(op, value.values(), std::nullopt, destination, "extended().reduce_to");
}

Mirrored<Tensor> StrategyExtended::reduce_to(ReduceOp op, const DistributedValues<Tensor>& value,
                                             const DistributedValues<Tensor>& destinations,
                                             const CommunicationOptions& options) {
  Tensor reduced = reduce_to(op, value, Device::cpu(), options);
  std::vector<Tensor> copies;
  copies.reserve(destinations.values().size());
  for (const Tensor& d : destinations.values()) copies.push_back(reduced.to(d.device()));
  return Mirrored<Tensor>(std::move(copies));
}

std::vector<Tensor> StrategyExtended::batch_reduce_to(
    ReduceOp op, const std::vector<std::pair<DistributedValues<Tensor>, Device>>& value_destination_pairs,
    const CommunicationOptions& options) {
  require_cross_replica_or_default("extended().batch_reduce_to");
  std::vector<Tensor> out;
  out.reserve(value_destination_pairs.size());
  for (const auto& [value, destination] : value_destination_pairs) {
    out.push_back(reduce_to(op, value, destination, options));
  }
  return out;
}

Tensor StrategyExtended::gather_to(const DistributedValues<Tensor>& value, const Device& destination, int axis,
                                   const CommunicationOptions&) {
  require_cross_replica_or_default("extended().gather_to",
                                   "inside a replica use get_replica_context()->all_gather() instead");
  return detail::concat_components(value.values(), axis, destination, "Strategy::gather");
}

}  // namespace distribute
