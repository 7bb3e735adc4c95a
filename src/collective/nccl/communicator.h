// The NCCL backend (tf.distribute.NcclAllReduce) for replicas on distinct physical GPUs.
//
// One NCCL communicator per replica, all created together when the strategy is built (before any
// replica can issue a collective, the init barrier that thread-per-GPU programs need), each used
// only by its replica's thread and on its replica's stream. Communicators are non-blocking, so no
// NCCL op can block a thread: every wait is a poll that gives up when the run fails or times out,
// aborting the replica's communicator (ncclCommAbort); the next run rebuilds them all.
//
// all_reduce packs runs of same-dtype leaves into the output block itself (the outputs of a nest
// are one allocation, so packing costs one device copy per leaf and no memory) and reduces the
// packs, bounded by bytes_per_pack, in one NCCL group; a single tensor is reduced straight from
// input to output. all_gather broadcasts each replica's part in one group, which handles parts of
// different sizes along the axis, and lays out gathers along inner axes with strided copies.
//
// With CommunicationOptions::compression (and more than one rank), float32 leaves cross in 16
// bits: each rank sends every other rank its shard's values rounded (ncclSend / ncclRecv), adds
// what it receives to its own shard in float32 and rounds that sum, and the rounded sums are
// all-gathered (all_reduce) or kept (reduce_scatter); compression_kernels.h has the arithmetic.
// The ranks' overflow flags are all-gathered and read on the host, so such a call waits for its
// stream (on an async lane, the lane does).
//
// Under the multi-worker strategy one communicator spans every worker's GPUs (NcclSpan): the
// first worker's unique id reaches the others through the process-level engine, and replica r of
// a worker is rank first_rank + r. Its collectives were matched on every worker before they were
// issued, so a failed run lets them complete instead of aborting them (that would strand the
// other workers' kernels); only an NCCL error or a timeout aborts it, and then for good, as a
// communicator across processes can only be rebuilt by every worker together.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nccl.h>

#include "device/replica_device.h"
#include "collective/communicator.h"

namespace distribute::collective::nccl {

// Where this process's replicas sit in a communicator spanning several processes.
struct NcclSpan {
  int num_ranks = 0;   // over every process
  int first_rank = 0;  // this process's replica 0; the process with rank 0 creates the unique id
  // Called on every process with the unique id's bytes (filled on the creating process only);
  // returns with the creating process's bytes in them.
  std::function<void(std::span<std::byte> id)> share_id;
};

class NcclCommunicator final : public Communicator {
 public:
  // devices[r] is replica r's GPU replica device; each must be a different physical GPU (across
  // the processes of a span too).
  explicit NcclCommunicator(std::vector<detail::ReplicaDevice*> devices, std::optional<NcclSpan> span = std::nullopt);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string_view name() const override { return "NcclAllReduce"; }
  CommunicationImplementation implementation() const override { return CommunicationImplementation::kNccl; }
  void stage(int rank, CollectiveOp& op) override;
  bool spans_processes() const override { return span_.has_value(); }
  void prepare(std::span<CollectiveOp* const> ops) override;
  void set_gather_dims(std::vector<std::int64_t> dims) override { gather_dims_ = std::move(dims); }
  void all_reduce(int rank, std::span<CollectiveOp* const> ops) override;
  void all_gather(int rank, std::span<CollectiveOp* const> ops) override;
  void reduce_scatter(int rank, std::span<CollectiveOp* const> ops) override;
  void begin_run() override;
  void abort(int rank) override;

 private:
  void create_communicators();
  // Waits until rank's communicator has taken the operations started with `started`.
  void wait(int rank, ncclResult_t started, const CollectiveOp& op);
  [[noreturn]] void fail(int rank, ncclResult_t result, const CollectiveOp& op);
  // The compressed path of all_reduce (`whole`) and reduce_scatter for the float32 leaves among
  // `leaves`; throws InvalidArgumentError on every rank when a rank's values overflowed the format.
  void reduce_compressed(int rank, const CollectiveOp& mine, std::span<const std::size_t> leaves, bool whole);
  // Which leaves of `op` take the compressed path.
  bool compressed(const CollectiveOp& op, std::size_t leaf) const;
  // Every rank of the communicator, over every process.
  int num_ranks() const { return span_ ? span_->num_ranks : static_cast<int>(devices_.size()); }
  // Replica `rank` of this process as errors name it: its global id.
  int replica_id(int rank) const { return (span_ ? span_->first_rank : 0) + rank; }

  std::vector<detail::ReplicaDevice*> devices_;
  const std::optional<NcclSpan> span_;
  std::vector<ncclComm_t> comms_;       // comms_[r] is used only by replica r's thread
  std::vector<unsigned char> aborted_;  // written by replica r's thread, read between runs
  // all_gather: each rank's size along the axis per leaf ([leaf * num_ranks() + rank]), copied
  // from the ops by prepare() (or given by set_gather_dims()) while every replica still waits,
  // since a replica may read it after the others have left.
  std::vector<std::int64_t> gather_dims_;
};

}  // namespace distribute::collective::nccl
