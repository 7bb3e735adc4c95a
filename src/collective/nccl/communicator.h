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
#pragma once

#include <cstdint>
#include <vector>

#include <nccl.h>

#include "device/replica_device.h"
#include "collective/communicator.h"

namespace distribute::collective::nccl {

class NcclCommunicator final : public Communicator {
 public:
  // devices[r] is replica r's GPU replica device; each must be a different physical GPU.
  explicit NcclCommunicator(std::vector<detail::ReplicaDevice*> devices);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string_view name() const override { return "NcclAllReduce"; }
  CommunicationImplementation implementation() const override { return CommunicationImplementation::kNccl; }
  void stage(int rank, CollectiveOp& op) override;
  void prepare(std::span<CollectiveOp* const> ops) override;
  void all_reduce(int rank, std::span<CollectiveOp* const> ops) override;
  void all_gather(int rank, std::span<CollectiveOp* const> ops) override;
  void begin_run() override;
  void abort(int rank) override;

 private:
  void create_communicators();
  // Waits until rank's communicator has taken the operations started with `started`.
  void wait(int rank, ncclResult_t started, const CollectiveOp& op);
  [[noreturn]] void fail(int rank, ncclResult_t result, const CollectiveOp& op);

  std::vector<detail::ReplicaDevice*> devices_;
  std::vector<ncclComm_t> comms_;       // comms_[r] is used only by replica r's thread
  std::vector<unsigned char> aborted_;  // written by replica r's thread, read between runs
  // all_gather: each replica's size along the axis per leaf ([leaf * size + r]), copied from the
  // ops by prepare() while every replica still waits, since a replica may read it after the
  // others have left.
  std::vector<std::int64_t> gather_dims_;
};

}  // namespace distribute::collective::nccl
