// Communicator: the data-moving half of a collective, implemented once per backend
// (collective/cpu/ now; collective/nccl/ and collective/mpi/ later, with the same file names).
// A CollectiveGroup calls it only after the rendezvous has matched every replica's call, so a
// backend never sees mismatched shapes and never has to detect misuse itself.
#pragma once

#include <atomic>
#include <span>
#include <string_view>

#include "distribute/collective/collective_call.h"

namespace distribute::collective {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string_view name() const = 0;

  // Called by replica `rank` before it arrives at the rendezvous (call.sequence is set): a
  // backend may copy what the data phase needs so that no replica has to wait for the others to
  // finish reading its inputs. Sets call.staged when it did.
  virtual void stage(int /*rank*/, CollectiveCall& /*call*/) {}

  // Called once per collective by the rendezvous's last arriver, after the calls matched and
  // before any replica is released: a backend may reset per-collective shared state here.
  virtual void prepare(std::span<CollectiveCall* const> /*calls*/) {}

  // Each is called by every replica `rank` with the same `calls` (calls[r] is replica r's).
  // Returns when rank's outputs hold the result and no replica will read rank's inputs or write
  // rank's outputs again.
  virtual void all_reduce(int rank, std::span<CollectiveCall* const> calls) = 0;
  // Output buffers are allocated here through calls[rank]->allocate_output, once the gathered
  // shapes are known.
  virtual void all_gather(int rank, std::span<CollectiveCall* const> calls) = 0;

  // Before each run, while no replica runs: a backend whose connections a failure broke (NCCL
  // communicators after an abort) builds new ones here.
  virtual void begin_run() {}
  // On replica `rank`'s thread, after its run failed or timed out: stop waiting for device work
  // that depends on peers (NCCL: abort the replica's communicator).
  virtual void abort(int /*rank*/) {}

  // Set by the group: true once the current run has failed. Backends that poll a device check it
  // so that no replica keeps waiting for a peer that will not come.
  void set_failure_flag(const std::atomic<bool>* failed) { failed_ = failed; }

 protected:
  bool run_failed() const { return failed_ != nullptr && failed_->load(std::memory_order_acquire); }

 private:
  const std::atomic<bool>* failed_ = nullptr;
};

}  // namespace distribute::collective
