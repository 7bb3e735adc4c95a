// StrategyExtended: the cross-replica operations, checked here and carried out by the backend.
#include "distribute/strategy/strategy_extended.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/mutex.h"
#include "collective/communicator.h"
#include "device/kernels.h"
#include "distribute/replica/internal/context_stack.h"
#include "distribute/strategy/strategy.h"
#include "replica/call_signature.h"
#include "cluster/coordinator.h"
#include "strategy/cross_worker.h"

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

}  // namespace
}  // namespace detail

Tensor StrategyExtended::reduce_components(ReduceOp op, std::span<const Tensor> components, std::optional<int> axis,
                                           const Device& destination, const CommunicationOptions& options,
                                           const char* what) {
  cluster::Coordinator* workers = coordinator();
  collective::Communicator* backend = nullptr;
  absl::InlinedVector<collective::DeviceBuffer, 8> values;
  std::int64_t denominator = static_cast<std::int64_t>(components.size());
  Shape shape;
  int open_axis = -1;
  // Along an axis, each value is first summed over it on the host (the one kernel that exists
  // only there); MEAN then divides by the number of elements reduced, not the number of replicas,
  // so uneven per-replica batches weigh correctly.
  std::vector<Tensor> partial;
  std::exception_ptr error;
  try {
    detail::check_components(components, what);
    backend = checked_backend(options, what);
    shape = components[0].shape();
    const DType dtype = components[0].dtype();
    if (!axis) {
      detail::check_same_except(components, std::nullopt, what,
                                "with axis=None the shapes must be equal (pass an axis to also reduce along it)");
      for (const Tensor& t : components) values.push_back({t.raw_data(), t.device()});
    } else {
      const int a = normalize_axis(*axis, components[0].rank(), what);
      detail::check_same_except(components, a, what, "the shapes may differ only along axis");
      open_axis = a;
      shape = components[0].shape().without_dim(a);
      denominator = 0;
      for (const Tensor& t : components) {
        const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
        partial.push_back(Tensor::empty(dtype, shape, Device::cpu()));
        detail::sum_over_axis(dtype, host.raw_data(), host.shape().outer_size(a), host.shape()[a],
                              host.shape().inner_size(a), partial.back().raw_data());
        values.push_back({partial.back().raw_data(), Device::cpu()});
        denominator += t.shape()[a];
      }
      denominator = std::max<std::int64_t>(denominator, 1);
    }
  } catch (...) {
    // Across workers, a local check that failed reaches every worker before any data moves.
    if (workers == nullptr) throw;
    error = std::current_exception();
  }
  const CommunicationOptions merged = options.merged_with(default_options_);
  if (workers != nullptr) {
    detail::agree_on_cross_replica_step(*workers, collective::CollectiveKind::kReduceTo, op, open_axis,
                                        error ? Tensor() : components[0], merged.timeout, error);
  }
  const DType dtype = components[0].dtype();
  Tensor out = Tensor::empty(dtype, shape, destination);
  if (backend != nullptr) {
    backend->reduce_to(op, dtype, values, out.num_elements(), denominator, out.raw_data(), destination,
                       {what, merged.timeout});
  } else {
    collective::reduce_at_destination(op, dtype, values, out.num_elements(), denominator, out.raw_data(), destination);
  }
  return out;
}

Tensor StrategyExtended::concat_components(std::span<const Tensor> components, int axis, const Device& destination,
                                           const CommunicationOptions& options, const char* what) {
  cluster::Coordinator* workers = coordinator();
  collective::Communicator* backend = nullptr;
  absl::InlinedVector<collective::DeviceBuffer, 8> values;
  absl::InlinedVector<std::int64_t, 8> dims;
  int a = 0;
  std::exception_ptr error;
  try {
    detail::check_components(components, what);
    backend = checked_backend(options, what);
    DISTRIBUTE_CHECK(components[0].rank() > 0, InvalidArgumentError, what,
                     ": the values have rank 0 (scalars); gathering needs rank >= 1, reshape them to shape (1,) first");
    a = normalize_axis(axis, components[0].rank(), what);
    detail::check_same_except(components, a, what, "the shapes may differ only along axis");
    for (const Tensor& t : components) {
      values.push_back({t.raw_data(), t.device()});
      dims.push_back(t.shape()[a]);
    }
  } catch (...) {
    if (workers == nullptr) throw;
    error = std::current_exception();
  }
  const CommunicationOptions merged = options.merged_with(default_options_);
  if (workers != nullptr) {
    detail::agree_on_cross_replica_step(*workers, collective::CollectiveKind::kGatherTo, ReduceOp::kSum, a,
                                        error ? Tensor() : components[0], merged.timeout, error);
  }
  const Shape& shape = components[0].shape();
  const DType dtype = components[0].dtype();
  const std::size_t inner_bytes = static_cast<std::size_t>(shape.inner_size(a)) * dtype_size(dtype);
  Tensor out;
  const auto output = [&](std::int64_t total) -> void* {
    out = Tensor::empty(dtype, shape.with_dim(a, total), destination);
    return out.raw_data();
  };
  if (backend != nullptr) {
    backend->gather_to(values, dims, shape.outer_size(a), inner_bytes, output, destination, {what, merged.timeout});
  } else {
    std::int64_t total = 0;
    for (std::int64_t d : dims) total += d;
    collective::gather_at_destination(values, dims, shape.outer_size(a), inner_bytes, output(total), destination);
  }
  return out;
}

collective::Communicator* StrategyExtended::checked_backend(const CommunicationOptions& options, const char* what) {
  collective::Communicator* backend = communicator();
  DISTRIBUTE_CHECK(options.compression == Compression::kNone, InvalidArgumentError, what,
                   ": CommunicationOptions::compression is ", compression_name(options.compression),
                   " but only all_reduce and reduce_scatter in a replica's fn compress; pass Compression::kNone");
  const CommunicationImplementation wanted = options.merged_with(default_options_).implementation;
  DISTRIBUTE_CHECK(backend == nullptr || wanted == CommunicationImplementation::kAuto ||
                       wanted == backend->implementation(),
                   InvalidArgumentError, what, ": CommunicationOptions::implementation is ", implementation_name(wanted),
                   " but this strategy's collectives go through ", std::string(backend->name()),
                   "; pass kAuto, or choose the backend when building the strategy");
  return backend;
}

StrategyExtended::StrategyExtended(Strategy& container, std::vector<Device> devices,
                                   CommunicationOptions default_options)
    : container_(container), worker_devices_(std::move(devices)), default_options_(default_options) {}

void StrategyExtended::require_cross_replica_or_default(const char* method, const char* hint) const {
  detail::require_cross_replica_or_default(container_, method, hint);
}

CollectiveStats StrategyExtended::collective_stats() const {
  require_cross_replica_or_default("extended().collective_stats");
  return CollectiveStats{.worker_id = worker_id(), .replicas = {}};
}

Tensor StrategyExtended::reduce_to(ReduceOp op, const DistributedValues<Tensor>& value, const Device& destination,
                                   const CommunicationOptions& options) {
  require_cross_replica_or_default("extended().reduce_to");
  return reduce_components(op, value.values(), std::nullopt, destination, options, "extended().reduce_to");
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
                                   const CommunicationOptions& options) {
  require_cross_replica_or_default("extended().gather_to",
                                   "inside a replica use get_replica_context()->all_gather() instead");
  return concat_components(value.values(), axis, destination, options, "extended().gather_to");
}

}  // namespace distribute
