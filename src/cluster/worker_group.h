// distribute::cluster: WorkerGroup, the workers (processes) of a multi-worker strategy as the
// collectives see them: their WorkerTransport, the data steps across them (sum, gather,
// broadcast) and whether they can still be used. A data step that fails or stalls leaves the
// group unusable, as a step left half done cannot be taken back: every later step throws
// UnavailableError citing the first failure. The Coordinator (coordinator.h) owns the group:
// what the workers agree on before a step is its vote; the hierarchical communicator takes the
// data steps.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "base/mutex.h"
#include "base/wait.h"
#include "cluster/worker_transport.h"
#include "distribute/device/dtype.h"
#include "distribute/errors.h"

namespace distribute::cluster {

// "worker 1" or "workers 0, 2", and when the workers of the job are on more than one host the
// hosts of those named: "workers 2, 3 on host1", "workers 1, 2 on host0, host1". hosts[w] is
// worker w's.
std::string workers_on_hosts(const std::vector<int>& workers, const std::vector<std::string>& hosts);

class WorkerGroup {
 public:
  WorkerGroup(std::unique_ptr<WorkerTransport> transport, int num_local_replicas);
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  int num_workers() const { return transport_->num_workers(); }
  int worker_id() const { return transport_->worker_id(); }
  int num_local_replicas() const { return num_local_; }
  int workers_on_this_host() const { return transport_->workers_on_this_host(); }
  WorkerTransport& transport() { return *transport_; }
  // Each worker's host name, in worker order.
  const std::vector<std::string>& hosts() const { return transport_->hosts(); }

  // "worker 1 (replicas 2, 3)" or "workers 0, 2 (replicas 0, 1, 4, 5)", with the hosts as
  // workers_on_hosts names them.
  std::string workers_text(const std::vector<int>& workers) const;

  // UnavailableError, citing the first failure, once the group is unusable.
  void check_usable() const;
  bool usable() const { return !broken_.load(std::memory_order_acquire); }
  // Makes the group unusable for `reason`; the first reason stays.
  void make_unusable(std::string reason);
  // Throws DeadlineExceededError, leaving the group unusable, when another worker gave up on the
  // strategy while this one was late: `what()` (this worker's step, named only then) is abandoned.
  void check_nobody_gave_up(absl::FunctionRef<std::string()> what);

  // data = the sum over workers, in place, float32 values crossing in 16 bits with
  // `compression` (cluster/ring_all_reduce.h). InvalidArgumentError, on every worker, when a
  // value overflowed that format; the group stays usable.
  void all_reduce(DType dtype, void* data, std::int64_t count, std::chrono::duration<double> timeout,
                  const StepName& what, Compression compression = Compression::kNone);
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

 private:
  // Runs `step` once the group is known usable; an Error from it goes to abandon_data_step.
  void take_data_step(const StepName& what, absl::FunctionRef<void()> step);
  // In a catch of `error` from a data step `what`: rethrows it, or the error naming the workers
  // that gave up, and leaves the group unusable.
  [[noreturn]] void abandon_data_step(const Error& error, const StepName& what);

  const std::unique_ptr<WorkerTransport> transport_;
  const int num_local_;
  mutable detail::Mutex broken_mu_;
  std::string broken_reason_ ABSL_GUARDED_BY(broken_mu_);
  // Set once broken_reason_ is: the cheap check before every step.
  std::atomic<bool> broken_{false};
};

}  // namespace distribute::cluster
