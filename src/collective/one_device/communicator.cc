// The reduction-to-one-device backend: reduce on replica 0's device, copy the result back.
#include "collective/one_device/communicator.h"

#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "device/storage.h"
#include "distribute/errors.h"

namespace distribute::collective::one_device {

using detail::ReplicaDevice;

OneDeviceCommunicator::OneDeviceCommunicator(std::vector<ReplicaDevice*> devices, detail::WaitPolicy policy)
    : devices_(std::move(devices)), phase_(static_cast<int>(devices_.size()), policy) {}

void OneDeviceCommunicator::stage(int rank, CollectiveOp& op) {
  ReplicaDevice& me = *devices_[static_cast<std::size_t>(rank)];
  if (op.kind == CollectiveKind::kMergeCall) {
    // merge_fn reads every replica's values from one thread: they must be complete.
    detail::wait_for_device_work(me, rank, op.options.timeout, [this] { return run_failed(); }, op_name(op));
    return;
  }
  me.mark(ReplicaDevice::Mark::kReady);
}

void OneDeviceCommunicator::all_reduce(int rank, std::span<CollectiveOp* const> ops) {
  const std::size_t n = ops.size();
  ReplicaDevice& me = *devices_[static_cast<std::size_t>(rank)];
  ReplicaDevice& root = *devices_[0];
  const CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  const CollectiveOp& root_op = *ops[0];
  if (rank == 0) {
    root_error_ = nullptr;
    try {
      for (std::size_t r = 1; r < n; ++r) me.wait_for(ReplicaDevice::Mark::kReady, *devices_[r]);
      // Inputs in another memory space are copied next to the root first; the copies are freed
      // on the root's stream after the reduction.
      std::vector<detail::StorageRef> scratch;
      absl::InlinedVector<const void*, 8> inputs(n);
      for (std::size_t leaf = 0; leaf < mine.inputs.size(); ++leaf) {
        const BufferRef& in = mine.inputs[leaf];
        for (std::size_t r = 0; r < n; ++r) {
          inputs[r] = ops[r]->inputs[leaf].data;
          if (devices_[r]->memory_space() != me.memory_space() && in.nbytes() != 0) {
            scratch.push_back(detail::allocate_storage(me.device(), in.nbytes()));
            me.copy(scratch.back()->data(), inputs[r], in.nbytes());
            inputs[r] = scratch.back()->data();
          }
        }
        me.reduce(in.dtype, mine.op, inputs, mine.output_data[leaf], in.num_elements(), static_cast<std::int64_t>(n));
      }
      me.mark(ReplicaDevice::Mark::kDone);
    } catch (...) {
      root_error_ = std::current_exception();
    }
  }
  phase_.arrive_and_wait_uninterruptible();  // the reduction is issued (or failed)
  std::exception_ptr error = root_error_;
  if (rank != 0 && !error) {
    try {
      me.wait_for(ReplicaDevice::Mark::kDone, root);
      for (std::size_t leaf = 0; leaf < mine.output_data.size(); ++leaf) {
        me.copy(mine.output_data[leaf], root_op.output_data[leaf], mine.inputs[leaf].nbytes());
      }
      me.mark(ReplicaDevice::Mark::kDone);
    } catch (...) {
      error = std::current_exception();
    }
  }
  phase_.arrive_and_wait_uninterruptible();  // every copy of the result is issued
  if (rank == 0 && !error) {
    // The root's output (and the inputs) may be reused by the root only after the copies.
    try {
      for (std::size_t r = 1; r < n; ++r) me.wait_for(ReplicaDevice::Mark::kDone, *devices_[r]);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (!error) return;
  if (rank != 0 && error == root_error_) {
    throw AbortedError(absl::StrCat("the reduction of ", op_name(mine), " on ", root.device().short_name(),
                                    " failed: ", detail::describe_exception(error)));
  }
  std::rethrow_exception(error);
}

void OneDeviceCommunicator::all_gather(int rank, std::span<CollectiveOp* const> ops) {
  const std::size_t n = ops.size();
  ReplicaDevice& me = *devices_[static_cast<std::size_t>(rank)];
  CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  // Every replica assembles its own output from every input.
  read_every_input(rank, [&] {
    for (std::size_t leaf = 0; leaf < mine.inputs.size(); ++leaf) {
      const Shape& shape = *mine.inputs[leaf].shape;
      const int axis = gather_axis(mine, shape);
      std::int64_t total = 0;
      for (std::size_t r = 0; r < n; ++r) total += (*ops[r]->inputs[leaf].shape)[axis];
      auto* out = static_cast<char*>(mine.allocate_output(mine.allocate_context, leaf, shape.with_dim(axis, total)));
      const std::size_t unit = static_cast<std::size_t>(shape.inner_size(axis)) * dtype_size(mine.inputs[leaf].dtype);
      const auto rows = static_cast<std::size_t>(shape.outer_size(axis));
      std::size_t column = 0;
      for (std::size_t r = 0; r < n; ++r) {
        const auto width = static_cast<std::size_t>((*ops[r]->inputs[leaf].shape)[axis]) * unit;
        if (mine.gather_in_place && r == static_cast<std::size_t>(rank)) {
          column += width;
          continue;
        }
        me.copy_rows(out + column, static_cast<std::size_t>(total) * unit, ops[r]->inputs[leaf].data, width, width,
                     rows);
        column += width;
      }
    }
  });
}

void OneDeviceCommunicator::reduce_scatter(int rank, std::span<CollectiveOp* const> ops) {
  const std::size_t n = ops.size();
  ReplicaDevice& me = *devices_[static_cast<std::size_t>(rank)];
  const CollectiveOp& mine = *ops[static_cast<std::size_t>(rank)];
  // Every replica reduces its own shard on its own device from every input, copying the shards of
  // inputs in another memory space next to it first.
  read_every_input(rank, [&] {
    std::vector<detail::StorageRef> scratch;
    absl::InlinedVector<const void*, 8> inputs(n);
    for (std::size_t leaf = 0; leaf < mine.inputs.size(); ++leaf) {
      const BufferRef& in = mine.inputs[leaf];
      const Shard shard = shard_of(in.num_elements(), static_cast<std::int64_t>(n), rank);
      const std::size_t offset = static_cast<std::size_t>(shard.begin) * dtype_size(in.dtype);
      const std::size_t bytes = static_cast<std::size_t>(shard.size) * dtype_size(in.dtype);
      for (std::size_t r = 0; r < n; ++r) {
        inputs[r] = static_cast<const std::byte*>(ops[r]->input_data[leaf]) + offset;
        if (devices_[r]->memory_space() != me.memory_space() && bytes != 0) {
          scratch.push_back(detail::allocate_storage(me.device(), bytes));
          me.copy(scratch.back()->data(), inputs[r], bytes);
          inputs[r] = scratch.back()->data();
        }
      }
      me.reduce(in.dtype, mine.op, inputs, mine.output_data[leaf], shard.size, static_cast<std::int64_t>(n));
    }
  });
}

void OneDeviceCommunicator::read_every_input(int rank, absl::FunctionRef<void()> read) {
  const std::size_t n = devices_.size();
  ReplicaDevice& me = *devices_[static_cast<std::size_t>(rank)];
  // A failure must still reach the barrier, or the others would wait forever.
  std::exception_ptr error;
  try {
    for (std::size_t r = 0; r < n; ++r) {
      if (r != static_cast<std::size_t>(rank)) me.wait_for(ReplicaDevice::Mark::kReady, *devices_[r]);
    }
    read();
    me.mark(ReplicaDevice::Mark::kDone);
  } catch (...) {
    error = std::current_exception();
  }
  phase_.arrive_and_wait_uninterruptible();  // every replica's reads are issued
  if (!error) {
    // This replica's input may be overwritten only after the peers' reads of it.
    try {
      for (std::size_t r = 0; r < n; ++r) {
        if (r != static_cast<std::size_t>(rank)) me.wait_for(ReplicaDevice::Mark::kDone, *devices_[r]);
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace distribute::collective::one_device
