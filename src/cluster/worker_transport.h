// distribute::cluster: what carries a multi-worker strategy's messages and data between its
// workers (processes), apart from how: the interface the workers' agreement
// (cluster/coordinator.h) and their group (cluster/worker_group.h) use, implemented over MPI in
// src/cluster/mpi/. Every call that waits takes a deadline; a data phase that stalls past it is
// the transport's to report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/wait.h"
#include "distribute/collective/internal/collective_op.h"
#include "distribute/device/dtype.h"

namespace distribute::cluster {

// What a step across the workers is called in messages ("all_reduce #3", "Strategy::reduce"),
// spelt out only when a message needs it: a step that succeeds builds no string. It refers to
// what it was made from, so it lives no longer than the call it is passed to.
class StepName {
 public:
  StepName(const char* text) : text_(text) {}  // implicit: a string where a name is expected
  StepName(const std::string& text) : text_(text.c_str()) {}
  explicit StepName(const collective::CollectiveOp& op) : op_(&op) {}
  std::string str() const { return op_ != nullptr ? collective::op_name(*op_) : std::string(text_); }

 private:
  const char* text_ = "";
  const collective::CollectiveOp* op_ = nullptr;
};

// What a data phase that stalls past its deadline does: end the job (kEndJob), or throw
// DeadlineExceededError and leave the transport unusable while the job goes on (kFailStrategy).
// The strategy's public StalledCollectiveAction maps onto it; the transport knows no strategy.
enum class OnStall { kEndJob, kFailStrategy };

// The workers' messages: who they are, and the small exchanges by which they agree on each step
// (or learn that one of them left or gave up). Every call is the agreement's, never a tensor's.
class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  virtual int num_workers() const = 0;
  virtual int worker_id() const = 0;
  // How many workers (this one included) share this worker's machine: their replica threads
  // compete for the same cores, which decides whether waiting threads may spin.
  virtual int workers_on_this_host() const = 0;
  // Each worker's host name, in worker order.
  virtual const std::vector<std::string>& hosts() const = 0;
  // Sends `mine` to every worker and receives worker w's bytes (of mine.size()) into
  // all[w * mine.size(), ...). Returns the workers whose bytes had not come when `deadline`
  // passed (then the exchange is abandoned), else nothing.
  virtual std::vector<int> exchange(std::span<const std::byte> mine, std::span<std::byte> all, detail::Deadline deadline) = 0;
  // The same on a channel of its own, which the distributed input's step agreement uses
  // (input/internal/worker_agreement.h): a worker waiting there never takes a collective's header
  // for its own, or the other way round.
  virtual std::vector<int> exchange_input(std::span<const std::byte> mine, std::span<std::byte> all,
                                          detail::Deadline deadline) = 0;
  // Sends `mine` to every other worker as this worker's part of their next exchange, without
  // waiting for theirs: this worker's last word.
  virtual void send_farewell(std::span<const std::byte> mine) = 0;
  // Tells every other worker, without waiting, that this one gave up on a step of the strategy
  // (`what`) when its deadline passed: it makes no more collectives of the strategy, so a worker
  // that arrives later must not start the step's data phase with it.
  virtual void send_gave_up(const StepName& what) = 0;
  // The notes of other workers that gave up (sent by send_gave_up) that have come, each once:
  // {worker, what}. A data phase waiting for such a worker throws DeadlineExceededError instead of
  // waiting for it.
  virtual std::vector<std::pair<int, std::string>> take_gave_up() = 0;
};

// The workers' data: the collectives' payloads, once the control channel's exchange has agreed
// on the step. Every call is a data phase, which the transport reports if it stalls (OnStall).
class DataChannel {
 public:
  virtual ~DataChannel() = default;
  // data = the sum of every worker's data, `count` elements of `dtype`, in place. `what` names
  // the collective if the data phase stalls past `deadline`: the transport then ends the job, or
  // throws DeadlineExceededError, as its strategy's options say. With a `compression` other than
  // kNone (float32 only) the values cross in 16 bits (cluster/ring_all_reduce.h); returns the
  // lowest worker at which a finite value overflowed that format, -1 for none, on every worker.
  virtual int all_reduce(DType dtype, void* data, std::int64_t count, Compression compression,
                         detail::Deadline deadline, const StepName& what) = 0;
  // out = every worker's bytes in worker order; sizes[w] is worker w's (sizes[worker_id()] is mine's).
  virtual void all_gather(const void* mine, std::span<const std::size_t> sizes, void* out, detail::Deadline deadline,
                          const StepName& what) = 0;
  // Worker `root`'s `bytes` at `data` replace every other worker's, bit for bit.
  virtual void broadcast(void* data, std::size_t bytes, int root, detail::Deadline deadline, const StepName& what) = 0;
};

// What a backend provides: both channels, between the same workers.
class WorkerTransport : public ControlChannel, public DataChannel {};

}  // namespace distribute::cluster
