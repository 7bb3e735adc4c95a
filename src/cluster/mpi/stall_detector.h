// distribute::cluster::mpi: what a data phase does when it stalls past its deadline. A collective
// left half done cannot be taken back, so the stall is reported, naming the workers that do not
// answer a liveness query, and then either ends the job (MPI_Abort) or, with OnStall::kFailStrategy,
// is thrown while the abandoned transfers go on into buffers kept until they complete. A worker
// that waits anywhere in the strategy answers the others' queries through here, and a data phase
// that learns that other workers gave up on its step (control_channel.h) leaves through here too.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/wait.h"
#include "cluster/mpi/communicator_slots.h"
#include "cluster/mpi/control_channel.h"
#include "cluster/mpi/runtime.h"
#include "cluster/worker_transport.h"

namespace distribute::cluster::mpi {

class StallDetector {
 public:
  StallDetector(CommunicatorSlot& slot, MpiControlChannel& control, OnStall on_stall)
      : slot_(slot), control_(control), on_stall_(on_stall) {}

  OnStall on_stall() const { return on_stall_; }
  // Waits for every request of a data phase; past `deadline`, reports `what` and the workers that
  // do not answer a liveness query (stalled). When it throws, the caller abandons the requests.
  void wait_for_data(std::span<MPI_Request> requests, detail::Deadline deadline, const StepName& what);
  // Keeps `requests`, and `buffers` (every buffer of the transport that a data phase hands MPI),
  // until they complete, past the transport's life: MPI may still complete them (the caller does
  // not hold the MPI lock). The slot serves no other strategy.
  void abandon(std::span<MPI_Request> requests, std::initializer_list<std::vector<std::byte>*> buffers);
  // Answers other workers' liveness queries (takes the MPI lock).
  void answer_queries();
  // The transport goes: hands what was abandoned to the runtime.
  void leave() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());

 private:
  // Past the deadline of `requests`: asks the other workers whether they are alive, for a grace
  // period. Returns what was found (the silent workers, or another worker's finding), or nothing
  // when the requests completed meanwhile.
  std::optional<std::string> find_stall(std::span<MPI_Request> requests);
  // Ends the job with `report` on stderr, or throws it as DeadlineExceededError, as on_stall_ says.
  void stalled(const std::string& report);
  // In a data phase: when other workers gave up on the step (their notes came), throws
  // DeadlineExceededError if every other worker did, else reports it as a stall does.
  void leave_if_others_gave_up(const StepName& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());
  void reply_to_queries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());

  CommunicatorSlot& slot_;
  MpiControlChannel& control_;
  const OnStall on_stall_;
  std::int64_t queries_ ABSL_GUARDED_BY(MpiRuntime::instance().mutex()) = 0;
  Abandoned abandoned_ ABSL_GUARDED_BY(MpiRuntime::instance().mutex());
};

}  // namespace distribute::cluster::mpi
