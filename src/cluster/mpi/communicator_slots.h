// distribute::cluster::mpi: the communicators each transport works on, duplicated from its base
// communicator and kept for the next strategy rather than freed. A message still on its way to a
// destroyed strategy (a worker's last header, a note) then arrives where the next strategy on the
// slot drops it by its nonce. Freed, their contexts would go to new communicators, into whose
// message order Open MPI would mix such a message. The registry is process-wide (the runtime owns
// it); a CommunicatorSlot is one transport's share of it, and every channel of the transport
// works on that slot.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "cluster/mpi/runtime.h"

namespace distribute::cluster::mpi {

// The tags of the messages on a slot's two communicators. On the collectives' communicator: the
// two exchanges, and the ring's steps.
constexpr int kHeaderTag = 17;
constexpr int kInputTag = 23;
constexpr int kRingTag = 21;
// On the liveness communicator: a worker whose data phase stalled asks every other worker whether
// it is alive (kQueryTag, the query's number); a worker that waits in the strategy answers
// (kAnswerTag, the same number). What the first worker to conclude found (text), sent to the
// others before it ends the job or fails its call (kFindingTag). A worker that gave up on a step
// at its deadline tells the others (kGaveUpTag, text: the step).
constexpr int kQueryTag = 18;
constexpr int kAnswerTag = 19;
constexpr int kFindingTag = 20;
constexpr int kGaveUpTag = 22;

// The slots of every base communicator. Slot k of a base is the same pair of communicators on
// every worker: the workers make slots together and pick one together.
class CommunicatorSlots {
 public:
  // What a transport is given: slot `index` of `base`, what its workers found of their hosts.
  struct Taken {
    int index = 0;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm probe_comm = MPI_COMM_NULL;
    int on_host = 1;  // the workers on this worker's host
    std::vector<std::string> hosts;  // each worker's host name
  };

  // The lowest slot of `base` free on every worker, else a new one: collective on `base`.
  Taken take(MPI_Comm base) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());
  // Frees slot `index` of `base`, whose collectives' communicator is `comm`, for the next strategy.
  void give_back(MPI_Comm base, int index, MPI_Comm comm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());

 private:
  struct OfBase {
    MPI_Comm base = MPI_COMM_NULL;
    std::vector<std::array<MPI_Comm, 2>> pairs;
    std::vector<char> in_use;
    int on_host = 1;
    std::vector<std::string> hosts;
  };
  // The slots of `base`. Every worker must come with as many: when they do not (a program freed
  // its base communicator and got another with the same handle on some workers), every worker
  // starts a new list.
  OfBase& slots_of(MPI_Comm base) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());

  std::vector<OfBase> bases_;
};

// One transport's slot, taken when it is made: the communicators of its channels, its workers,
// and the nonce that frames its messages.
class CommunicatorSlot {
 public:
  // The workers are the ranks of `base` (MPI is initialised first, if it is not).
  explicit CommunicatorSlot(MPI_Comm base);
  CommunicatorSlot(const CommunicatorSlot&) = delete;
  CommunicatorSlot& operator=(const CommunicatorSlot&) = delete;

  MPI_Comm comm() const { return comm_; }  // the collectives and the exchanges
  MPI_Comm probe_comm() const { return probe_comm_; }  // liveness queries, apart from the collectives' traffic
  int rank() const { return rank_; }
  int size() const { return size_; }
  int on_host() const { return on_host_; }
  const std::vector<std::string>& hosts() const { return hosts_; }
  // A number every worker's transport on this slot shares (worker 0 draws it), which every message
  // starts with, so that one left for an earlier strategy on the slot is dropped.
  std::uint64_t nonce() const { return nonce_; }

  // A step was abandoned (a worker did not follow): the slot serves no other strategy, and
  // MPI_Finalize at exit is bounded, as that worker may never come.
  void give_up();
  // The transport goes: the slot serves the next strategy, unless it was given up (a strategy that
  // abandoned a step may have left the communicators' collectives out of step between the workers).
  void release() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());

 private:
  MPI_Comm base_ = MPI_COMM_NULL;
  int index_ = 0;
  // Whether the slot may serve another strategy: false once a step was abandoned.
  std::atomic<bool> reusable_{true};
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int on_host_ = 1;
  std::vector<std::string> hosts_;
  std::uint64_t nonce_ = 0;
};

}  // namespace distribute::cluster::mpi
