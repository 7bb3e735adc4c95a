// ReplicaContext: where a replica's collectives enter the group, or stay local for one replica.
#include "distribute/replica/replica_context.h"

#include "absl/strings/str_cat.h"
#include "device/storage.h"
#include "replica/replica_group.h"

namespace distribute {

ReplicaContext::ReplicaContext(Strategy& strategy, int replica_id, int num_replicas, detail::ReplicaGroup* group,
                               Device device, int run_depth, int local_replica_id, bool default_context)
    : strategy_(&strategy),
      replica_id_(replica_id),
      local_replica_id_(local_replica_id < 0 ? replica_id : local_replica_id),
      num_replicas_(num_replicas),
      group_(group),
      device_(std::move(device)),
      run_depth_(run_depth),
      default_context_(default_context) {}

void ReplicaContext::require_current(const char* method) const {
  const detail::ThreadMode& mode = detail::current_mode();
  if (mode.replica_context == this) return;
  if (default_context_ && mode.strategy == nullptr) return;  // no scope: the default context
  if (mode.cross_replica) {
    throw FailedPreconditionError(absl::StrCat(
        "ReplicaContext::", method, " of replica ", replica_id_,
        " called in cross-replica context; call it inside the fn passed to Strategy::run, or use the "
        "cross-replica counterpart (Strategy::reduce, Strategy::gather, extended().reduce_to)"));
  }
  throw FailedPreconditionError(absl::StrCat(
      "ReplicaContext::", method, " of replica ", replica_id_, " called from a thread that is not that replica's "
      "(this thread is in ",
      mode.replica_context != nullptr ? absl::StrCat("the context of replica ", mode.replica_context->replica_id_in_sync_group())
                                      : std::string("the default context"),
      "); use get_replica_context() on the calling thread"));
}

detail::ThreadMode ReplicaContext::merge_mode() const {
  return detail::ThreadMode{strategy_, nullptr, true, run_depth_ + 1};
}

void ReplicaContext::issue_async(std::shared_ptr<detail::AsyncCollective> job) {
  if (group_ == nullptr) {
    job->run();
    return;
  }
  group_->issue_async(local_replica_id_, std::move(job));
}

void ReplicaContext::run_all_reduce(detail::CollectiveArgs& args) {
  detail::CollectiveCall& call = args.call();
  if (group_ != nullptr) {
    group_->all_reduce(local_replica_id_, call);
    return;
  }
  // One replica: SUM and MEAN are the input itself. Its options are checked as a group's are.
  detail::check_timeout(call.op.options.timeout, "CommunicationOptions::timeout", "the strategy's timeout");
  for (std::size_t leaf = 0; leaf < args.size(); ++leaf) {
    const collective::BufferRef& in = call.op.inputs[leaf];
    if (call.op.output_data[leaf] != in.data) {
      detail::copy_bytes(call.op.output_data[leaf], device_, in.data, device_, in.nbytes());
    }
  }
}

void ReplicaContext::run_all_gather(detail::CollectiveArgs& args) {
  detail::CollectiveCall& call = args.call();
  if (group_ != nullptr) {
    group_->all_gather(local_replica_id_, call);
    return;
  }
  detail::check_timeout(call.op.options.timeout, "CommunicationOptions::timeout", "the strategy's timeout");
  for (std::size_t leaf = 0; leaf < args.size(); ++leaf) {
    const collective::BufferRef& in = call.op.inputs[leaf];
    void* out = call.op.allocate_output(call.op.allocate_context, leaf, *in.shape);
    if (out != in.data) detail::copy_bytes(out, device_, in.data, device_, in.nbytes());
  }
}

void ReplicaContext::run_reduce_scatter(detail::CollectiveArgs& args) {
  detail::CollectiveCall& call = args.call();
  if (group_ != nullptr) {
    group_->reduce_scatter(local_replica_id_, call);
    return;
  }
  // One replica: its shard is the whole input.
  detail::check_timeout(call.op.options.timeout, "CommunicationOptions::timeout", "the strategy's timeout");
  for (std::size_t leaf = 0; leaf < args.size(); ++leaf) {
    const collective::BufferRef& in = call.op.inputs[leaf];
    detail::copy_bytes(call.op.output_data[leaf], device_, in.data, device_, in.nbytes());
  }
}

void ReplicaContext::all_gather_shards_in_place(std::span<const Tensor> wholes, const CommunicationOptions& options) {
  require_current("all_gather_shards_in_place");
  std::vector<Tensor> shards;
  shards.reserve(wholes.size());
  for (const Tensor& whole : wholes) {
    const Shard part = shard(whole.num_elements());
    shards.push_back(whole.reshape(Shape{whole.num_elements()}).slice(part.begin, part.begin + part.size));
  }
  detail::CollectiveArgs args(shards, collective::CollectiveKind::kAllGather, device_);
  args.call().op.options = options;
  args.call().purpose = purpose();
  args.prepare_gather(0);
  args.gather_into(wholes);
  run_all_gather(args);
}

std::shared_ptr<void> ReplicaContext::run_merge_call(detail::CollectiveCall& call) {
  if (group_ != nullptr) return group_->merge_call(local_replica_id_, call);
  call.op.sequence = 1;
  detail::CollectiveCall* calls[] = {&call};
  return call.run_merge(std::span<detail::CollectiveCall* const>(calls, 1));
}

namespace detail {
namespace {

// Larger arrays go back to the system rather than stay with the thread.
constexpr std::size_t kMaxSpareLeaves = 1 << 16;

thread_local std::unique_ptr<LeafArrays> spare_leaf_arrays;

}  // namespace

LeafArraysLease::LeafArraysLease() : arrays_(std::move(spare_leaf_arrays)) {
  if (!arrays_) arrays_ = std::make_unique<LeafArrays>();
}

LeafArraysLease::~LeafArraysLease() {
  if (!spare_leaf_arrays && arrays_->inputs.capacity() <= kMaxSpareLeaves) spare_leaf_arrays = std::move(arrays_);
}

void CollectiveArgs::throw_wrong_device(const Tensor& t, std::size_t leaf) const {
  DISTRIBUTE_CHECK(t.defined(), InvalidArgumentError, method_, ": leaf ", leaf,
                   " is an undefined Tensor (default-constructed)");
  throw InvalidArgumentError(absl::StrCat(
      method_, ": leaf ", leaf, " is on ", t.device().short_name(), " but the replica runs on ", device_.short_name(),
      "; create it inside the replica's function (tensors default to the replica's device) or move it with to()"));
}

const void* CollectiveArgs::scalar_on_device(const void* value, DType dtype) {
  Tensor t = Tensor::empty(dtype, Shape{}, device_);
  copy_bytes(t.raw_data(), device_, value, Device::cpu(), dtype_size(dtype));
  device_scalars_.push_back(t);
  return t.raw_data();
}

void CollectiveArgs::allocate_outputs_like_inputs() {
  const std::size_t n = inputs_.size();
  // The output tensors themselves are made by rebuild(), straight into the returned nest.
  if (host_scalars_ < n) block_ = allocate_storage(device_, block_bytes_);
  auto* base = block_ ? static_cast<std::byte*>(block_->data()) : nullptr;
  void** output_data = data_pointers_.data() + n;
  scalars_.resize(host_scalars_);
  std::size_t scalar = 0;
  for (std::size_t leaf = 0; leaf < n; ++leaf) {
    const bool in_slot = host_scalars_ != 0 && host_scalar(inputs_[leaf]);
    output_data[leaf] = in_slot ? scalars_[scalar++].data() : base + leaf_offsets_[leaf];
  }
  call_.op.output_data = {output_data, n};
  // The host scalars' outputs are inline slots, outside the block.
  call_.op.output_block = host_scalars_ == 0 ? base : nullptr;
}

void CollectiveArgs::use_inputs_as_outputs() {
  const std::size_t n = inputs_.size();
  for (std::size_t leaf = 0; leaf < n; ++leaf) {
    DISTRIBUTE_CHECK(inputs_[leaf].shape != &scalar_shape(), InvalidArgumentError, "all_reduce_in_place: leaf ", leaf,
                     " is a scalar, which has no memory to reduce into; pass Tensors (Tensor::scalar for one value)");
  }
  void** output_data = data_pointers_.data() + n;
  for (std::size_t leaf = 0; leaf < n; ++leaf) output_data[leaf] = data_pointers_[leaf];
  call_.op.output_data = {output_data, n};
}

void CollectiveArgs::prepare_gather(int axis) {
  tensors_.resize(inputs_.size());
  LeafDigest leaves;
  for (std::size_t leaf = 0; leaf < inputs_.size(); ++leaf) {
    const Shape& shape = *inputs_[leaf].shape;
    DISTRIBUTE_CHECK(shape.rank() > 0, InvalidArgumentError, method_, ": leaf ", leaf,
                     " has rank 0 (a scalar); all_gather needs every value to have rank >= 1, "
                     "reshape it to shape (1,) first");
    leaves.add(inputs_[leaf].dtype, shape.span(), normalize_axis(axis, shape.rank(), method_));
  }
  call_.op.axis = axis;
  call_.leaf_digest = leaves.value();
}

void CollectiveArgs::allocate_shard_outputs(int replica, int replicas) {
  const std::size_t n = inputs_.size();
  tensors_.resize(n);
  void** output_data = data_pointers_.data() + n;
  for (std::size_t leaf = 0; leaf < n; ++leaf) {
    const collective::BufferRef& in = inputs_[leaf];
    DISTRIBUTE_CHECK(in.shape != &scalar_shape(), InvalidArgumentError, method_, ": leaf ", leaf,
                     " is a scalar, which cannot be cut into shards; pass Tensors (Tensor::scalar for one value)");
    output_data[leaf] = allocate_output(leaf, Shape{shard_of(in.num_elements(), replicas, replica).size});
  }
  call_.op.output_data = {output_data, n};
}

void CollectiveArgs::gather_into(std::span<const Tensor> wholes) {
  call_.op.gather_in_place = true;
  gather_into_ = wholes;
}

void* CollectiveArgs::allocate_output(std::size_t leaf, const Shape& shape) {
  if (call_.op.gather_in_place) {
    const Tensor& whole = gather_into_[leaf];
    // Wholes of equal counts give shards that add up to that count on every replica; any other
    // counts leave at least one replica, and usually all, with a total unlike its own.
    DISTRIBUTE_CHECK(whole.num_elements() == shape.num_elements(), InvalidArgumentError,
                     "all_gather_shards_in_place: leaf ", leaf, ": the replicas' shards add up to ",
                     shape.num_elements(), " elements but this replica's whole has ", whole.num_elements(),
                     "; every replica must pass wholes of the same element counts");
    return const_cast<void*>(whole.raw_data());
  }
  tensors_[leaf] = Tensor::empty(inputs_[leaf].dtype, shape, device_);
  return tensors_[leaf].raw_data();
}

}  // namespace detail
}  // namespace distribute
