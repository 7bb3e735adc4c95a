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
#include "cluster/call_agreement.h"

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
  if (cluster::CallAgreement* agreement = call_agreement()) {
    return reduce_across_workers(*agreement, op, components, axis, destination, options, what);
  }
  return reduce_locally(op, components, axis, destination, options, what);
}

Tensor StrategyExtended::reduce_locally(ReduceOp op, std::span<const Tensor> components, std::optional<int> axis,
                                        const Device& destination, const CommunicationOptions& options,
                                        const char* what) {
  detail::check_components(components, what);
  collective::Communicator* backend = checked_backend(options, what);
  const DType dtype = components[0].dtype();
  absl::InlinedVector<collective::DeviceBuffer, 8> values;
  std::int64_t denominator = static_cast<std::int64_t>(components.size());
  Shape shape = components[0].shape();
  // Along an axis, each value is first summed over it on the host (the one kernel that exists
  // only there); MEAN then divides by the number of elements reduced, not the number of replicas,
  // so uneven per-replica batches weigh correctly.
  std::vector<Tensor> partial;
  if (!axis) {
    detail::check_same_except(components, std::nullopt, what,
                              "with axis=None the shapes must be equal (pass an axis to also reduce along it)");
    for (const Tensor& t : components) values.push_back({t.raw_data(), t.device()});
  } else {
    const int a = normalize_axis(*axis, components[0].rank(), what);
    detail::check_same_except(components, a, what, "the shapes may differ only along axis");
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
  Tensor out = Tensor::empty(dtype, shape, destination);
  if (backend != nullptr) {
    backend->reduce_to(op, dtype, values, out.num_elements(), denominator, out.raw_data(), destination);
  } else {
    collective::reduce_at_destination(op, dtype, values, out.num_elements(), denominator, out.raw_data(), destination);
  }
  return out;
}

Tensor StrategyExtended::concat_components(std::span<const Tensor> components, int axis, const Device& destination,
                                           const CommunicationOptions& options, const char* what) {
  if (cluster::CallAgreement* agreement = call_agreement()) {
    return concat_across_workers(*agreement, components, axis, destination, options, what);
  }
  return concat_locally(components, axis, destination, options, what);
}

Tensor StrategyExtended::concat_locally(std::span<const Tensor> components, int axis, const Device& destination,
                                        const CommunicationOptions& options, const char* what) {
  detail::check_components(components, what);
  collective::Communicator* backend = checked_backend(options, what);
  DISTRIBUTE_CHECK(components[0].rank() > 0, InvalidArgumentError, what,
                   ": the values have rank 0 (scalars); gathering needs rank >= 1, reshape them to shape (1,) first");
  const int a = normalize_axis(axis, components[0].rank(), what);
  detail::check_same_except(components, a, what, "the shapes may differ only along axis");
  absl::InlinedVector<collective::DeviceBuffer, 8> values;
  absl::InlinedVector<std::int64_t, 8> dims;
  std::int64_t total = 0;
  for (const Tensor& t : components) {
    values.push_back({t.raw_data(), t.device()});
    dims.push_back(t.shape()[a]);
    total += t.shape()[a];
  }
  const Shape& shape = components[0].shape();
  Tensor out = Tensor::empty(components[0].dtype(), shape.with_dim(a, total), destination);
  const std::size_t inner_bytes = static_cast<std::size_t>(shape.inner_size(a)) * dtype_size(components[0].dtype());
  if (backend != nullptr) {
    backend->gather_to(values, dims, shape.outer_size(a), inner_bytes, out.raw_data(), destination);
  } else {
    collective::gather_at_destination(values, dims, shape.outer_size(a), inner_bytes, out.raw_data(), destination);
  }
  return out;
}

namespace detail {
namespace {

// Agrees with the other workers on a cross-replica step: `kind` (kReduceTo, kGatherTo, kBroadcastTo) of one
// leaf, `value`'s dtype and shape, which may differ between workers along `open_axis` (-1: none).
// A local check that failed (`error`) is reported to every worker, and rethrown here.
void agree_across_workers(cluster::CallAgreement& agreement, collective::CollectiveKind kind, ReduceOp op, int open_axis,
                          const Tensor& value, std::chrono::duration<double> timeout, std::exception_ptr error) {
  CollectiveCall call;
  call.op.kind = kind;
  call.op.op = op;
  call.op.axis = open_axis;
  call.op.sequence = agreement.next_cross_replica_sequence();
  call.op.options.timeout = timeout;
  const collective::BufferRef leaf{nullptr, error ? &scalar_shape() : &value.shape(),
                                   error ? DType::kFloat32 : value.dtype()};
  call.op.inputs = std::span(&leaf, 1);
  LeafDigest leaves;
  leaves.add(leaf.dtype, leaf.shape->span(), open_axis);
  call.leaf_digest = leaves.value();
  call.signature = signature_digest(call);
  agreement.agree(CallBallot(error ? cluster::Ballot::Status::kFailed : cluster::Ballot::Status::kCall, call, error));
}

}  // namespace

Tensor first_worker_value(StrategyExtended& extended, const Tensor& mine) {
  cluster::CallAgreement* agreement = extended.call_agreement();
  if (agreement == nullptr || agreement->workers().num_workers() == 1) return mine;
  const auto timeout = CommunicationOptions{}.merged_with(extended.default_options_).timeout;
  // A copy: on the other workers the broadcast overwrites it.
  Tensor value = mine.device().is_cpu() ? mine.clone() : mine.to(Device::cpu());
  agree_across_workers(*agreement, collective::CollectiveKind::kBroadcastTo, ReduceOp::kSum, -1, value, timeout,
                       nullptr);
  agreement->workers().broadcast(value.raw_data(), value.nbytes(), 0, timeout, "the first replica's value");
  return mine.device().is_cpu() ? value : value.to(mine.device());
}

cluster::CallAgreement* call_agreement_of(StrategyExtended& extended) { return extended.call_agreement(); }

void agree_on_checkpoint(StrategyExtended& extended, const CallPurpose& purpose) {
  cluster::CallAgreement* agreement = extended.call_agreement();
  if (agreement == nullptr || agreement->workers().num_workers() == 1) return;
  CollectiveCall call;
  call.op.kind = collective::CollectiveKind::kCheckpoint;
  call.op.sequence = agreement->next_cross_replica_sequence();
  call.op.options.timeout = CommunicationOptions{}.merged_with(extended.default_options_).timeout;
  call.purpose = &purpose;
  call.leaf_digest = LeafDigest().value();
  call.signature = signature_digest(call);
  agreement->agree(CallBallot(cluster::Ballot::Status::kCall, call));
}

BetweenRuns::BetweenRuns(StrategyExtended& extended) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const ThreadMode& mode = current_mode();
  if (mode.strategy == &extended.container_strategy() && mode.run_depth > 0) return;
  held_ = extended.run_mutex();
  if (held_ != nullptr) held_->lock();
}

BetweenRuns::~BetweenRuns() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (held_ != nullptr) held_->unlock();
}

}  // namespace detail

Tensor StrategyExtended::reduce_across_workers(cluster::CallAgreement& agreement, ReduceOp op,
                                               std::span<const Tensor> components, std::optional<int> axis,
                                               const Device& destination, const CommunicationOptions& options,
                                               const char* what) {
  const CommunicationOptions merged = options.merged_with(default_options_);
  Tensor partial;
  std::int64_t count = 0;
  int open_axis = -1;
  std::exception_ptr error;
  try {
    detail::check_components(components, what);
    std::optional<int> a;
    if (axis) a = normalize_axis(*axis, components[0].rank(), what);
    // This worker's part: SUM for MEAN (divided once the counts of every worker are known).
    partial = reduce_locally(ReduceOp::kSum, components, a, Device::cpu(), options, what);
    for (const Tensor& t : components) count += a ? t.shape()[*a] : 1;
    open_axis = a.value_or(-1);
  } catch (...) {
    error = std::current_exception();
  }
  detail::agree_across_workers(agreement, collective::CollectiveKind::kReduceTo, op, open_axis,
                               error ? Tensor() : components[0], merged.timeout, error);
  cluster::WorkerGroup& workers = agreement.workers();
  workers.all_reduce(partial.dtype(), partial.raw_data(), partial.num_elements(), merged.timeout, what);
  if (op == ReduceOp::kMean) {
    const std::int64_t total = std::max<std::int64_t>(workers.sum(count, merged.timeout, what), 1);
    const void* in[] = {partial.raw_data()};
    detail::reduce_buffers(partial.dtype(), ReduceOp::kMean, in, partial.raw_data(), partial.num_elements(), total);
  }
  return partial.to(destination);
}

Tensor StrategyExtended::concat_across_workers(cluster::CallAgreement& agreement, std::span<const Tensor> components, int axis,
                                               const Device& destination, const CommunicationOptions& options,
                                               const char* what) {
  const CommunicationOptions merged = options.merged_with(default_options_);
  Tensor local;
  int a = 0;
  std::exception_ptr error;
  try {
    DISTRIBUTE_CHECK(!components.empty() && components[0].defined() && components[0].rank() > 0, InvalidArgumentError,
                     what, ": the values have rank 0 (scalars); gathering needs rank >= 1, reshape them to shape (1,) first");
    a = normalize_axis(axis, components[0].rank(), what);
    local = concat_locally(components, a, Device::cpu(), options, what);
  } catch (...) {
    error = std::current_exception();
  }
  detail::agree_across_workers(agreement, collective::CollectiveKind::kGatherTo, ReduceOp::kSum, a, local, merged.timeout,
                               error);
  const Shape& shape = local.shape();
  const std::int64_t outer = shape.outer_size(a);
  const std::size_t inner_bytes = static_cast<std::size_t>(shape.inner_size(a)) * dtype_size(local.dtype());
  Tensor out;
  agreement.workers().all_gather_along_axis(
      shape[a], outer, inner_bytes,
      [&](std::byte* part) {
        if (local.nbytes() != 0) std::memcpy(part, local.raw_data(), local.nbytes());
      },
      [&](std::int64_t total) {
        out = Tensor::empty(local.dtype(), shape.with_dim(a, total), Device::cpu());
        return static_cast<std::byte*>(out.raw_data());
      },
      merged.timeout, what);
  return out.to(destination);
}

collective::Communicator* StrategyExtended::checked_backend(const CommunicationOptions& options, const char* what) {
  collective::Communicator* backend = communicator();
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
