// distribute::detail: the agreement of the workers (processes) of a multi-worker strategy, over
// a WorkerTransport (collective/worker_transport.h; src/mpi/ gives the one over MPI), so that the
// core never includes or links an engine. One thread per worker takes each collective across the
// workers, and before any data moves the workers exchange a small header (status, kind,
// sequence, the digest of the call's signature). Only when the headers differ do they exchange
// the rendered signatures, from which every worker builds the same error naming the workers,
// their replicas and what differed (call_signature.h); a worker that does not arrive in time
// makes the strategy unusable, as a collective left half done cannot be taken back.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "collective/worker_transport.h"
#include "base/wait.h"
#include "distribute/device/dtype.h"
#include "distribute/device/reduce_op.h"
#include "distribute/errors.h"
#include "distribute/replica/internal/collective_call.h"

namespace distribute::detail {

// One worker's part in one cross-worker step.
struct WorkerCall {
  // kLeft: the worker destroyed its strategy (sent by the destructor, never passed to agree).
  enum class Status : std::uint32_t { kCall, kReturned, kFailed, kLeft };
  Status status = Status::kCall;
  // The step: its kind, sequence, signature and options (whose timeout bounds the agreement).
  // kReturned and kFailed: a return call.
  const CollectiveCall* call = nullptr;
  // kFailed: the error and the global id of the replica that raised it (-1: unknown).
  std::exception_ptr error;
  int failed_replica = -1;
};

class WorkerSync {
 public:
  WorkerSync(std::unique_ptr<WorkerTransport> engine, int num_local_replicas);
  // Tells the other workers that this one left: whoever waits for it, or calls a collective
  // later, gets UnavailableError naming it instead of waiting.
  ~WorkerSync();
  WorkerSync(const WorkerSync&) = delete;
  WorkerSync& operator=(const WorkerSync&) = delete;

  int num_workers() const { return engine_->num_workers(); }
  int worker_id() const { return engine_->worker_id(); }
  int num_local_replicas() const { return num_local_; }
  int workers_on_this_host() const { return engine_->workers_on_this_host(); }

  // Agrees with every other worker on `mine`. Returns when every worker made the same call (or
  // all returned); otherwise throws, on every worker, the error naming the workers that differ
  // (a failed worker's own error on that worker). DeadlineExceededError when a worker does not
  // arrive within the call's timeout: this worker then tells the others that it gave up, and a
  // worker that arrives later gets DeadlineExceededError naming the workers that gave up (never a
  // data phase with workers that left it). After either, UnavailableError at once.
  void agree(const WorkerCall& mine);
  // Whether every worker knows that the innermost current run ended: an agree() in it threw (on
  // every worker alike, also one of a cross-replica step in its merge_fn) or found every worker
  // returned. A run that failed on this worker alone before that must still tell the others (a
  // kFailed agree). Runs nest (a run in a merge_fn), each concluding on its own: begin_run() and
  // end_run() bracket each, on the thread that runs it.
  bool run_concluded() const { return !runs_.empty() && runs_.back(); }
  void begin_run() { runs_.push_back(false); }
  void end_run() { runs_.pop_back(); }
  // The number of cross-replica steps (reduce_to, gather_to) so far, counted alike on every worker.
  std::int64_t next_cross_replica_sequence() { return ++cross_replica_sequence_; }

  // data = the sum over workers, in place.
  void all_reduce(DType dtype, void* data, std::int64_t count, std::chrono::duration<double> timeout,
                  const StepName& what);
  // Concatenates every worker's `mine` in worker order (sizes may differ); returns the bytes and
  // fills `sizes` with each worker's count.
  std::vector<std::byte> all_gather(std::span<const std::byte> mine, std::vector<std::size_t>& sizes,
                                    std::chrono::duration<double> timeout, const StepName& what);
  // Concatenates every worker's part of a tensor along an axis, in worker order; the parts may
  // differ in size along the axis only. This worker's part has `dim` entries along the axis, each
  // of the `outer` outer slices `inner_bytes` long, and `write_part` fills its bytes. `output(total)`
  // gets the size along the axis over every worker and returns where the result goes.
  void all_gather_along_axis(std::int64_t dim, std::int64_t outer, std::size_t inner_bytes,
                             absl::FunctionRef<void(std::byte*)> write_part,
                             absl::FunctionRef<std::byte*(std::int64_t total)> output,
                             std::chrono::duration<double> timeout, const StepName& what);
  // Worker `root`'s `bytes` at `data` replace every other worker's.
  void broadcast(void* data, std::size_t bytes, int root, std::chrono::duration<double> timeout,
                 const StepName& what);
  // The sum over workers of `value`.
  std::int64_t sum(std::int64_t value, std::chrono::duration<double> timeout, const StepName& what);
  // WorkerTransport::exchange_input: the distributed input's channel, which leaves the strategy's state
  // alone.
  std::vector<int> exchange_input(std::span<const std::byte> mine, std::span<std::byte> all, Deadline deadline) {
    return engine_->exchange_input(mine, all, deadline);
  }

  // "worker 1 (replicas 2, 3)" or "workers 0, 2 (replicas 0, 1, 4, 5)".
  std::string workers_text(const std::vector<int>& workers) const;

 private:
  void check_usable() const;
  // Makes the strategy unusable: every later step throws UnavailableError citing `reason`.
  void break_with(std::string reason);
  // Throws DeadlineExceededError, leaving the strategy unusable, when another worker gave up on
  // the strategy while this one was late: `what()` (this worker's step, named only then) is
  // abandoned.
  void check_nobody_gave_up(absl::FunctionRef<std::string()> what);
  // In a catch of `error` from a data phase of `what`: rethrows it, or the error naming the
  // workers that gave up, and leaves the strategy unusable.
  [[noreturn]] void abandon_data_phase(const Error& error, const StepName& what);
  // Every worker's description of its call (its rendered signature, or its failure), exchanged
  // when the headers differ.
  std::vector<std::string> exchange_descriptions(const WorkerCall& mine, Deadline deadline);
  [[noreturn]] void time_out(const WorkerCall& mine, const std::vector<int>& missing);
  void agree_or_throw(const WorkerCall& mine);

  // What every worker sends before a step: equal headers mean equal calls.
  struct Header {
    std::uint32_t status;
    std::uint32_t kind;
    std::int64_t sequence;
    std::uint64_t signature;
    bool operator==(const Header&) const = default;
  };
  // UnavailableError, leaving the strategy unusable, when a worker's header says it left.
  void throw_if_a_worker_left(std::span<const Header> headers, absl::FunctionRef<std::string()> what);
  // The error of `worker`, which failed, from its description (the same on every worker).
  [[noreturn]] void throw_failure_of(int worker, absl::string_view described);

  std::unique_ptr<WorkerTransport> engine_;
  const int num_local_;
  std::int64_t cross_replica_sequence_ = 0;
  // Per run in progress, innermost last: whether it concluded. Written by whichever thread takes
  // the run's current step across the workers; the steps of a run are ordered by its rendezvous,
  // nested runs by their merge_fn, and a run's end by its runner.
  std::vector<bool> runs_;
  std::atomic<bool> broken_{false};
  std::string broken_reason_;  // written once, before broken_ is set
};

}  // namespace distribute::detail
