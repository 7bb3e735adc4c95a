// distribute::collective: Communicator, the data-moving half of a collective, implemented once per
// backend in src/collective/<backend>/communicator.{h,cc} (cpu: shared memory between threads;
// one_device: reduction on one device; nccl: NCCL between GPUs). The replica layer's group calls
// it only after the rendezvous has matched every replica's call, so a backend never sees
// mismatched shapes and never has to detect misuse itself.
//
// The unit is the process: a Communicator moves data between the replicas of one process, which
// are threads, and `rank` is the replica's index in the process. Several processes (workers) are
// joined hierarchically rather than by making every replica a peer of every other: the cluster
// layer's hierarchical Communicator (src/cluster/hierarchical_communicator.h) combines a worker's
// replicas locally, takes the local result across the workers in its cross_process_phase(), and
// shares the result locally again, so a backend written here is reused unchanged under the
// multi-worker strategy.
//
// GPUs are the exception: NCCL is itself the engine across processes, with its own hierarchy over
// NVLink, PCIe and the network, so a multi-worker strategy on GPUs builds one NCCL communicator
// spanning every worker's GPUs (spans_processes()). The workers still agree on each call through
// their transport before any data moves; then every replica is a rank of that one communicator
// and the data phase is the backend's own.
#pragma once

#include <atomic>
#include <chrono>
#include <span>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "distribute/collective/internal/collective_op.h"

namespace distribute::collective {

// A cross-replica operation as a Communicator sees it: its name in messages ("Strategy::reduce")
// and how long a step across processes may wait.
struct CrossReplicaStep {
  const char* what;
  std::chrono::duration<double> timeout;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string_view name() const = 0;
  // The CommunicationOptions::implementation this backend is; kAuto for one that is neither RING
  // nor NCCL (reduction to one device), which then serves only calls asking for kAuto.
  virtual CommunicationImplementation implementation() const = 0;
  // Whether the replicas are threads of this process reading each other's host memory, all of
  // them: then the replica layer may move a few bytes itself, without the data phase.
  virtual bool shares_host_memory() const { return false; }
  // Whether the replicas of every worker are ranks of this backend (NCCL across processes): then
  // the data phase is the backend's alone, and its collectives, once matched on every worker,
  // must be left to complete rather than aborted when this worker's run fails.
  virtual bool spans_processes() const { return false; }

  // Called by replica `rank` before it arrives at the rendezvous (op.sequence is set): a backend
  // may copy what the data phase needs so that no replica has to wait for the others to finish
  // reading its inputs. Sets op.staged when it did.
  virtual void stage(int /*rank*/, CollectiveOp& /*op*/) {}

  // For a Communicator joined to other processes (the cluster layer's hierarchical one): the step
  // across them, called once per collective by the rendezvous's last arriver after the ops
  // matched and the workers agreed on the call, before prepare(), while every replica waits. The
  // replica layer times it apart from the replicas' waiting (CollectiveStats). Returns the bytes
  // of payload it carried across the processes, as they went on the wire (16 bits per float32
  // value with compression).
  virtual std::int64_t cross_process_phase(std::span<CollectiveOp* const> /*ops*/) { return 0; }
  // Called once per collective by the rendezvous's last arriver, after the ops matched and
  // before any replica is released: a backend may copy what every replica will need from the
  // others' ops here, while all of them still wait.
  virtual void prepare(std::span<CollectiveOp* const> /*ops*/) {}
  // In cross_process_phase() of an all_gather, for a backend that spans processes: the size along
  // the axis of every rank's part, [leaf * ranks + rank] over the ranks of every worker.
  virtual void set_gather_dims(std::vector<std::int64_t> /*dims*/) {}

  // Each is called by every replica `rank` with the same `ops` (ops[r] is replica r's).
  // Returns when rank's outputs hold the result and no replica will read rank's inputs or write
  // rank's outputs again.
  virtual void all_reduce(int rank, std::span<CollectiveOp* const> ops) = 0;
  // Output buffers are allocated here through ops[rank]->allocate_output, once the gathered
  // shapes are known.
  virtual void all_gather(int rank, std::span<CollectiveOp* const> ops) = 0;
  // Output leaf k is rank's shard (shard_of, among every replica this backend joins) of the
  // reduction of input leaf k, flattened: output_data[k] holds its shard's elements.
  virtual void reduce_scatter(int rank, std::span<CollectiveOp* const> ops) = 0;

  // Cross-replica operations (Strategy::reduce and gather, extended().reduce_to and gather_to),
  // called on one thread while no collective of these replicas is in flight: a merge_fn's thread
  // while the replicas wait, or the caller outside run. values[r] is replica r's, on any device.
  // The defaults work where the result goes: host kernels for a host destination, the GPU's own
  // kernel and copies for a GPU one, copying only values from other memory spaces there, so that
  // GPU values never round-trip through the host.
  //
  // `step` names the operation in messages and bounds a step across processes.
  //
  // out = op over the values' `count` elements of `dtype` (MEAN divides by mean_denominator: the
  // number of values, or of elements reduced along an axis).
  virtual void reduce_to(ReduceOp op, DType dtype, std::span<const DeviceBuffer> values, std::int64_t count,
                         std::int64_t mean_denominator, void* out, const Device& destination,
                         const CrossReplicaStep& step);
  // Value r is [outer, dims[r] * inner_bytes] bytes; output(total) gets the size of the result
  // along the middle dimension (sum(dims) in one process) and returns where its
  // [outer, total * inner_bytes] bytes go, on `destination`.
  virtual void gather_to(std::span<const DeviceBuffer> values, std::span<const std::int64_t> dims, std::int64_t outer,
                         std::size_t inner_bytes, absl::FunctionRef<void*(std::int64_t total)> output,
                         const Device& destination, const CrossReplicaStep& step);

  // Before each run, while no replica runs: a backend whose connections a failure broke (NCCL
  // communicators after an abort) builds new ones here.
  virtual void begin_run() {}
  // On replica `rank`'s thread, after its run failed or timed out: stop waiting for device work
  // that depends on peers (NCCL: abort the replica's communicator).
  virtual void abort(int /*rank*/) {}

  // Set by the group: true once the current run has failed. Backends that poll a device check it
  // so that no replica keeps waiting for a peer that will not come.
  virtual void set_failure_flag(const std::atomic<bool>* failed) { failed_ = failed; }

 protected:
  bool run_failed() const { return failed_ != nullptr && failed_->load(std::memory_order_acquire); }

 private:
  const std::atomic<bool>* failed_ = nullptr;
};

// What Communicator::reduce_to and gather_to do by default, for strategies without a backend
// (one replica) too.
void reduce_at_destination(ReduceOp op, DType dtype, std::span<const DeviceBuffer> values, std::int64_t count,
                           std::int64_t mean_denominator, void* out, const Device& destination);
void gather_at_destination(std::span<const DeviceBuffer> values, std::span<const std::int64_t> dims,
                           std::int64_t outer, std::size_t inner_bytes, void* out, const Device& destination);

}  // namespace distribute::collective
