// distribute::cluster::mpi: the workers' transport over MPI. One process is one worker (its rank
// in MPI_COMM_WORLD, or in the communicator the cluster resolver names); the transport works on a
// slot of communicators of its own, duplicated from that one and kept for the next strategy when
// this one goes (communicator_slots.h), so that the program's own MPI traffic never matches the
// strategy's. It composes the backend's parts, each of one job: the slot, the control channel's
// framed messages (control_channel.h), the data channel's collectives (data_channel.h), and the
// stall detector (stall_detector.h) that reports a data phase stalled past its deadline, naming
// the workers that do not answer a liveness query. A worker whose header exchange times out tells
// the others that it gave up, so that a late worker does not start the step's data phase with it
// (see cluster::ControlChannel::send_gave_up).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cluster/mpi/communicator_slots.h"
#include "cluster/mpi/control_channel.h"
#include "cluster/mpi/data_channel.h"
#include "cluster/mpi/runtime.h"
#include "cluster/mpi/stall_detector.h"
#include "cluster/worker_transport.h"

namespace distribute::cluster::mpi {

class MpiWorkerTransport final : public WorkerTransport {
 public:
  // The workers are the ranks of `base`; `on_stall` says what a stalled data phase does.
  MpiWorkerTransport(MPI_Comm base, OnStall on_stall);
  ~MpiWorkerTransport() override;
  int num_workers() const override { return slot_.size(); }
  int worker_id() const override { return slot_.rank(); }
  int workers_on_this_host() const override { return slot_.on_host(); }
  const std::vector<std::string>& hosts() const override { return slot_.hosts(); }
  std::vector<int> exchange(std::span<const std::byte> mine, std::span<std::byte> all,
                            detail::Deadline deadline) override {
    return control_.exchange(kHeaderTag, mine, all, deadline, [this] { stall_.answer_queries(); });
  }
  std::vector<int> exchange_input(std::span<const std::byte> mine, std::span<std::byte> all,
                                  detail::Deadline deadline) override {
    return control_.exchange(kInputTag, mine, all, deadline, [this] { stall_.answer_queries(); });
  }
  void send_farewell(std::span<const std::byte> mine) override { control_.send_farewell(mine); }
  void send_gave_up(const StepName& what) override { control_.send_gave_up(what); }
  std::vector<std::pair<int, std::string>> take_gave_up() override { return control_.take_gave_up(); }
  int all_reduce(DType dtype, void* data, std::int64_t count, Compression compression, detail::Deadline deadline,
                  const StepName& what) override {
    return data_.all_reduce(dtype, data, count, compression, deadline, what);
  }
  void all_gather(const void* mine, std::span<const std::size_t> sizes, void* out, detail::Deadline deadline,
                  const StepName& what) override {
    data_.all_gather(mine, sizes, out, deadline, what);
  }
  void broadcast(void* data, std::size_t bytes, int root, detail::Deadline deadline, const StepName& what) override {
    data_.broadcast(data, bytes, root, deadline, what);
  }

 private:
  CommunicatorSlot slot_;
  MpiControlChannel control_;
  StallDetector stall_;
  MpiDataChannel data_;
};

}  // namespace distribute::cluster::mpi
