// HierarchicalCommunicator: a phase's data across the workers, in cross_process_phase(), and its
// copies out.
#include "cluster/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "base/timeline.h"
#include "device/kernels.h"

namespace distribute::cluster {

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<collective::Communicator> local, cluster::WorkerGroup& workers,
                                                   int local_replicas)
    : local_(std::move(local)), workers_(workers), size_(local_replicas) {}

void HierarchicalCommunicator::set_failure_flag(const std::atomic<bool>* failed) {
  collective::Communicator::set_failure_flag(failed);
  local_->set_failure_flag(failed);
}

void HierarchicalCommunicator::stage(int rank, collective::CollectiveOp& op) {
  // Otherwise cross_process_phase() reads every replica's inputs in place while they wait.
  if (local_->spans_processes()) local_->stage(rank, op);
}

std::int64_t HierarchicalCommunicator::cross_process_phase(std::span<collective::CollectiveOp* const> ops) {
  phase_.assume_held();
  const collective::CollectiveKind kind = ops[0]->kind;
  if (local_->spans_processes()) {
    if (kind == collective::CollectiveKind::kAllGather) share_gather_dims(ops);
    return 0;
  }
  if (kind == collective::CollectiveKind::kAllReduce || kind == collective::CollectiveKind::kReduceScatter) {
    return reduce_across_workers(ops);
  }
  if (kind == collective::CollectiveKind::kAllGather) return gather_across_workers(ops);
  return 0;
}

void HierarchicalCommunicator::prepare(std::span<collective::CollectiveOp* const> ops) {
  // The local backend's own preparation where it moves the data; otherwise the result is ready.
  if (local_->spans_processes()) local_->prepare(ops);
}

std::int64_t HierarchicalCommunicator::reduce_across_workers(std::span<collective::CollectiveOp* const> ops) {
  const collective::CollectiveOp& first = *ops[0];
  // One replica per worker (the default of MultiWorkerMirroredStrategy) whose outputs are one
  // block laid out like reduced_ (host memory, as every replica on this path is a CPU's): the
  // transport works in that block, which saves copying the whole result back out of reduced_.
  reduced_in_output_ = size_ == 1 && first.output_block != nullptr;
  std::byte* block = nullptr;
  if (reduced_in_output_) {
    block = static_cast<std::byte*>(first.output_block);
  } else {
    reduced_.resize(first.leaf_offsets.back());
    block = reduced_.data();
  }
  absl::InlinedVector<const void*, 8> inputs(static_cast<std::size_t>(size_));
  std::optional<detail::timeline::Span> local(std::in_place, detail::timeline::kCrossWorkerTrack, "local");
  for (std::size_t leaf = 0; leaf < first.inputs.size(); ++leaf) {
    for (std::size_t r = 0; r < inputs.size(); ++r) inputs[r] = ops[r]->input_data[leaf];
    std::byte* out = block + first.leaf_offsets[leaf];
    // MEAN is a sum here: divided once the workers' sums are added.
    detail::reduce_buffers(first.inputs[leaf].dtype, ReduceOp::kSum, inputs, out, first.inputs[leaf].num_elements(),
                           size_);
    // The padding up to the next leaf goes across the workers with its neighbours: zeros.
    std::byte* end = out + first.inputs[leaf].nbytes();
    std::memset(end, 0, static_cast<std::size_t>(block + first.leaf_offsets[leaf + 1] - end));
  }
  local.reset();
  // One step per run of leaves of one dtype: the padding between them is zero and stays so. A
  // run is leaves [begin, end), bytes [from, to) of the block.
  const auto for_each_run = [&](auto&& fn) {
    for (std::size_t begin = 0; begin < first.inputs.size();) {
      const DType dtype = first.inputs[begin].dtype;
      std::size_t end = begin + 1;
      while (end < first.inputs.size() && first.inputs[end].dtype == dtype) ++end;
      fn(dtype, first.leaf_offsets[begin], first.leaf_offsets[end - 1] + first.inputs[end - 1].nbytes());
      begin = end;
    }
  };
  const Compression compression = first.options.compression;
  std::int64_t wire_bytes = 0;
  if (workers_.num_workers() > 1) {
    for_each_run([&](DType dtype, std::size_t from, std::size_t to) {
      const auto bytes = static_cast<std::int64_t>(to - from);
      wire_bytes += compression != Compression::kNone && dtype == DType::kFloat32 ? bytes / 2 : bytes;
    });
  }
  const detail::timeline::Span across(detail::timeline::kCrossWorkerTrack, "data", [&] {
    return detail::timeline::Args{.bytes = wire_bytes};
  });
  const cluster::StepName what(first);
  const std::int64_t replicas = std::int64_t{size_} * workers_.num_workers();
  for_each_run([&](DType dtype, std::size_t from, std::size_t to) {
    void* data = block + from;
    const auto count = static_cast<std::int64_t>((to - from) / dtype_size(dtype));
    workers_.all_reduce(dtype, data, count, first.options.timeout, what, compression);
    if (first.op == ReduceOp::kMean) {
      const void* in[] = {data};
      detail::reduce_buffers(dtype, ReduceOp::kMean, in, data, count, replicas);
    }
  });
  return wire_bytes;
}

std::int64_t HierarchicalCommunicator::gather_across_workers(std::span<collective::CollectiveOp* const> ops) {
  const collective::CollectiveOp& first = *ops[0];
  const std::size_t leaves = first.inputs.size();
  gathered_.resize(leaves);
  gathered_shapes_.clear();
  // This worker's part of each leaf (its replicas' values) goes out with its size along the axis.
  std::int64_t wire_bytes = 0;
  for (std::size_t leaf = 0; leaf < leaves && workers_.num_workers() > 1; ++leaf) {
    const Shape& shape = *first.inputs[leaf].shape;
    const int axis = collective::gather_axis(first, shape);
    std::int64_t local = 0;
    for (int r = 0; r < size_; ++r) local += (*ops[static_cast<std::size_t>(r)]->inputs[leaf].shape)[axis];
    wire_bytes += static_cast<std::int64_t>(sizeof(local)) +
                  shape.outer_size(axis) * local * shape.inner_size(axis) * static_cast<std::int64_t>(dtype_size(first.inputs[leaf].dtype));
  }
  // Each leaf's local concatenation is done inside the step across the workers.
  const detail::timeline::Span across(detail::timeline::kCrossWorkerTrack, "data",
                                      [&] { return detail::timeline::Args{.bytes = wire_bytes}; });
  const cluster::StepName what(first);
  absl::InlinedVector<const void*, 8> inputs(static_cast<std::size_t>(size_));
  absl::InlinedVector<std::int64_t, 8> dims(static_cast<std::size_t>(size_));
  for (std::size_t leaf = 0; leaf < leaves; ++leaf) {
    const Shape& shape = *first.inputs[leaf].shape;
    const int axis = collective::gather_axis(first, shape);
    const std::int64_t outer = shape.outer_size(axis);
    const std::size_t inner_bytes =
        static_cast<std::size_t>(shape.inner_size(axis)) * dtype_size(first.inputs[leaf].dtype);
    // This worker's part: its replicas' values concatenated.
    std::int64_t local = 0;
    for (std::size_t r = 0; r < inputs.size(); ++r) {
      inputs[r] = ops[r]->inputs[leaf].data;
      dims[r] = (*ops[r]->inputs[leaf].shape)[axis];
      local += dims[r];
    }
    std::int64_t total = 0;
    std::vector<std::byte>& gathered = gathered_[leaf];
    workers_.all_gather_along_axis(
        local, outer, inner_bytes,
        [&](std::byte* out) { detail::concat_buffers(inputs, dims, outer, inner_bytes, out); },
        [&](std::int64_t all) {
          total = all;
          gathered.resize(static_cast<std::size_t>(outer * total) * inner_bytes);
          return gathered.data();
        },
        first.options.timeout, what);
    gathered_shapes_.push_back(shape.with_dim(axis, total));
  }
  return wire_bytes;
}

void HierarchicalCommunicator::share_gather_dims(std::span<collective::CollectiveOp* const> ops) {
  const collective::CollectiveOp& first = *ops[0];
  const std::size_t leaves = first.inputs.size();
  const auto local = static_cast<std::size_t>(size_);
  std::vector<std::int64_t> mine(leaves * local);
  for (std::size_t leaf = 0; leaf < leaves; ++leaf) {
    const int axis = collective::gather_axis(first, *first.inputs[leaf].shape);
    for (std::size_t r = 0; r < local; ++r) mine[leaf * local + r] = (*ops[r]->inputs[leaf].shape)[axis];
  }
  std::vector<std::size_t> sizes;
  const std::vector<std::byte> bytes =
      workers_.all_gather(std::as_bytes(std::span(mine)), sizes, first.options.timeout, cluster::StepName(first));
  // Worker w's entries are [w][leaf][r]; the local collective::Communicator wants [leaf][w * local + r].
  const auto workers = static_cast<std::size_t>(workers_.num_workers());
  const auto ranks = workers * local;
  std::vector<std::int64_t> dims(leaves * ranks);
  for (std::size_t w = 0; w < workers; ++w) {
    for (std::size_t i = 0; i < leaves * local; ++i) {
      std::int64_t dim = 0;
      std::memcpy(&dim, bytes.data() + (w * leaves * local + i) * sizeof dim, sizeof dim);
      dims[(i / local) * ranks + w * local + i % local] = dim;
    }
  }
  local_->set_gather_dims(std::move(dims));
}

void HierarchicalCommunicator::all_reduce(int rank, std::span<collective::CollectiveOp* const> ops) {
  if (local_->spans_processes()) {
    local_->all_reduce(rank, ops);
    return;
  }
  phase_.assume_shared();
  if (reduced_in_output_) return;
  // Each replica copies the result to its own outputs, in parallel.
  const collective::CollectiveOp& op = *ops[static_cast<std::size_t>(rank)];
  for (std::size_t leaf = 0; leaf < op.inputs.size(); ++leaf) {
    const std::size_t bytes = op.inputs[leaf].nbytes();
    if (bytes != 0) std::memcpy(op.output_data[leaf], reduced_.data() + op.leaf_offsets[leaf], bytes);
  }
}

void HierarchicalCommunicator::reduce_scatter(int rank, std::span<collective::CollectiveOp* const> ops) {
  if (local_->spans_processes()) {
    local_->reduce_scatter(rank, ops);
    return;
  }
  phase_.assume_shared();
  const collective::CollectiveOp& op = *ops[static_cast<std::size_t>(rank)];
  const std::int64_t replicas = std::int64_t{size_} * workers_.num_workers();
  const std::int64_t id = std::int64_t{workers_.worker_id()} * size_ + rank;
  for (std::size_t leaf = 0; leaf < op.inputs.size(); ++leaf) {
    const collective::BufferRef& in = op.inputs[leaf];
    const Shard shard = shard_of(in.num_elements(), replicas, id);
    const std::size_t element = dtype_size(in.dtype);
    if (shard.size == 0) continue;
    const std::byte* from = reduced_.data() + op.leaf_offsets[leaf] + static_cast<std::size_t>(shard.begin) * element;
    std::memcpy(op.output_data[leaf], from, static_cast<std::size_t>(shard.size) * element);
  }
}

void HierarchicalCommunicator::all_gather(int rank, std::span<collective::CollectiveOp* const> ops) {
  if (local_->spans_processes()) {
    local_->all_gather(rank, ops);
    return;
  }
  phase_.assume_shared();
  const collective::CollectiveOp& op = *ops[static_cast<std::size_t>(rank)];
  for (std::size_t leaf = 0; leaf < gathered_.size(); ++leaf) {
    void* out = op.allocate_output(op.allocate_context, leaf, gathered_shapes_[leaf]);
    if (!gathered_[leaf].empty()) std::memcpy(out, gathered_[leaf].data(), gathered_[leaf].size());
  }
}

void HierarchicalCommunicator::reduce_to(ReduceOp op, DType dtype, std::span<const collective::DeviceBuffer> values,
                                         std::int64_t count, std::int64_t mean_denominator, void* out,
                                         const Device& destination, const collective::CrossReplicaStep& step) {
  // This worker's sum on the host (in `out` itself for a host destination), summed across the
  // workers; MEAN divides by every worker's denominators together, so uneven per-worker batches
  // weigh correctly.
  std::vector<std::byte> scratch;
  void* sum = out;
  if (!destination.is_cpu()) {
    scratch.resize(static_cast<std::size_t>(count) * dtype_size(dtype));
    sum = scratch.data();
  }
  local_->reduce_to(ReduceOp::kSum, dtype, values, count, 1, sum, Device::cpu(), step);
  workers_.all_reduce(dtype, sum, count, step.timeout, step.what);
  std::int64_t denominator = 1;
  if (op == ReduceOp::kMean) {
    denominator = std::max<std::int64_t>(workers_.sum(mean_denominator, step.timeout, step.what), 1);
  }
  if (destination.is_cpu() && op == ReduceOp::kSum) return;
  const collective::DeviceBuffer reduced{sum, Device::cpu()};
  collective::reduce_at_destination(op, dtype, std::span(&reduced, 1), count, denominator, out, destination);
}

void HierarchicalCommunicator::gather_to(std::span<const collective::DeviceBuffer> values,
                                         std::span<const std::int64_t> dims, std::int64_t outer,
                                         std::size_t inner_bytes, absl::FunctionRef<void*(std::int64_t total)> output,
                                         const Device& destination, const collective::CrossReplicaStep& step) {
  std::int64_t local = 0;
  for (std::int64_t d : dims) local += d;
  // The worker's part is its replicas' values concatenated on the host, written straight into
  // the step's send buffer; the workers' parts are concatenated in place for a host destination,
  // else on the host and then copied.
  std::vector<std::byte> gathered;
  void* result = nullptr;
  std::int64_t total = 0;
  workers_.all_gather_along_axis(
      local, outer, inner_bytes,
      [&](std::byte* part) {
        local_->gather_to(values, dims, outer, inner_bytes, [part](std::int64_t) -> void* { return part; },
                          Device::cpu(), step);
      },
      [&](std::int64_t all) {
        total = all;
        if (destination.is_cpu()) {
          result = output(total);
        } else {
          gathered.resize(static_cast<std::size_t>(outer * total) * inner_bytes);
          result = gathered.data();
        }
        return static_cast<std::byte*>(result);
      },
      step.timeout, step.what);
  if (destination.is_cpu()) return;
  const collective::DeviceBuffer host{result, Device::cpu()};
  const std::int64_t dim[] = {total};
  collective::gather_at_destination(std::span(&host, 1), dim, outer, inner_bytes, output(total), destination);
}

}  // namespace distribute::cluster
