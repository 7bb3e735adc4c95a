// distribute::cluster::HierarchicalCommunicator: the collective::Communicator of a multi-worker
// strategy, a worker's local Communicator (its replicas, threads of this process) joined to the
// other workers through their WorkerGroup. In cross_process_phase(), which the replica layer's
// completer of a phase runs while the other replicas wait, an all_reduce is reduced over the local
// replicas on the host, summed across the workers and kept for the replicas to copy (a
// reduce_scatter likewise, each replica copying its shard); an all_gather is assembled likewise.
// Only that one thread per process talks to the other processes, so the transport needs no thread
// support and the messages grow with the workers, not the replicas. The cross-replica operations
// (reduce_to, gather_to: Strategy::reduce and gather) are hierarchical too: the local result,
// then the step across the workers, then the copy to the destination.
//
// Where the local Communicator spans the processes itself (NCCL over every worker's GPUs) the data
// phase is the local one's; this only tells it every worker's sizes along an all_gather's axis.
// The workers agree on each call before its cross-process phase (cluster/coordinator.h), so a
// step begun here is one every worker makes.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/role.h"
#include "collective/communicator.h"
#include "cluster/worker_group.h"

namespace distribute::cluster {

class HierarchicalCommunicator final : public collective::Communicator {
 public:
  // `local`'s replicas are this worker's; `workers` outlives this.
  HierarchicalCommunicator(std::unique_ptr<collective::Communicator> local, cluster::WorkerGroup& workers, int local_replicas);

  std::string_view name() const override { return local_->name(); }
  CommunicationImplementation implementation() const override { return local_->implementation(); }
  bool spans_processes() const override { return local_->spans_processes(); }
  void stage(int rank, collective::CollectiveOp& op) override;
  std::int64_t cross_process_phase(std::span<collective::CollectiveOp* const> ops) override;
  void prepare(std::span<collective::CollectiveOp* const> ops) override;
  void all_reduce(int rank, std::span<collective::CollectiveOp* const> ops) override;
  void all_gather(int rank, std::span<collective::CollectiveOp* const> ops) override;
  void reduce_scatter(int rank, std::span<collective::CollectiveOp* const> ops) override;
  void reduce_to(ReduceOp op, DType dtype, std::span<const collective::DeviceBuffer> values, std::int64_t count,
                 std::int64_t mean_denominator, void* out, const Device& destination,
                 const collective::CrossReplicaStep& step) override;
  void gather_to(std::span<const collective::DeviceBuffer> values, std::span<const std::int64_t> dims,
                 std::int64_t outer, std::size_t inner_bytes, absl::FunctionRef<void*(std::int64_t total)> output,
                 const Device& destination, const collective::CrossReplicaStep& step) override;
  void begin_run() override { local_->begin_run(); }
  void abort(int rank) override { local_->abort(rank); }
  void set_failure_flag(const std::atomic<bool>* failed) override;

 private:
  // Each returns the bytes it sent as on the wire (Communicator::cross_process_phase).
  std::int64_t reduce_across_workers(std::span<collective::CollectiveOp* const> ops) ABSL_EXCLUSIVE_LOCKS_REQUIRED(phase_);
  std::int64_t gather_across_workers(std::span<collective::CollectiveOp* const> ops) ABSL_EXCLUSIVE_LOCKS_REQUIRED(phase_);
  // For a local collective::Communicator that spans the workers: every worker's sizes along the axis.
  void share_gather_dims(std::span<collective::CollectiveOp* const> ops);

  const std::unique_ptr<collective::Communicator> local_;
  cluster::WorkerGroup& workers_;
  const int size_;
  // Held alone by cross_process_phase() (the completer of a phase, while every replica waits),
  // shared by the replicas after the phase's release until the next phase's cross_process_phase(),
  // which runs only once every replica has arrived there.
  detail::Role phase_;
  std::vector<std::byte> reduced_ ABSL_GUARDED_BY(phase_);  // an all_reduce's (reduce_scatter's) result
  // The last all_reduce across workers was reduced straight in its one replica's output block.
  bool reduced_in_output_ ABSL_GUARDED_BY(phase_) = false;
  std::vector<std::vector<std::byte>> gathered_ ABSL_GUARDED_BY(phase_);  // an all_gather's leaves across workers
  std::vector<Shape> gathered_shapes_ ABSL_GUARDED_BY(phase_);
};

}  // namespace distribute::cluster
