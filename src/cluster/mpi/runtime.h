// distribute::cluster::mpi: the one object that holds what MPI makes process-wide. MPI is
// initialised once per process, cannot be again after MPI_Finalize, and serves every strategy's
// transport at once; so the lock that serialises calls into MPI, the watchdog over those calls,
// the communicators kept for the next strategy, and what an abandoned step leaves to MPI until it
// finalises all live here, and everything else of the backend lives no longer than its transport.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/call_watchdog.h"
#include "base/mutex.h"
#include "base/wait.h"

namespace distribute::cluster::mpi {

class CommunicatorSlots;

// Throws UnavailableError naming `call` unless `rc` is MPI_SUCCESS.
void check(int rc, const char* call);

// The requests of data phases given up at their deadline, and every buffer they may still read
// or write, kept until the requests complete: past the transport's life, until MPI_Finalize.
struct Abandoned {
  std::vector<MPI_Request> requests;
  std::vector<std::vector<std::byte>> buffers;
};

class MpiRuntime {
 public:
  // The process's runtime, made at first use and never destroyed: MPI_Finalize runs at exit, and
  // objects destroyed at exit (the timeline's transport) still take the MPI lock.
  static MpiRuntime& instance();

  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // Initialises MPI unless the program has (requesting MPI_THREAD_MULTIPLE, requiring
  // MPI_THREAD_SERIALIZED, else UnavailableError), then finalises it at exit.
  void ensure_initialized();

  // Calls into MPI from several threads (several strategies, or the caller and a replica thread)
  // are serialised by this lock, so that MPI_THREAD_SERIALIZED suffices.
  detail::Mutex& mutex() ABSL_LOCK_RETURNED(mutex_) { return mutex_; }

  // The communicators of every strategy, in slots kept for the next ones (communicator_slots.h).
  CommunicatorSlots& slots() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return *slots_; }

  // Times each non-blocking MPI call (call_watchdog.h says why one can spin): its thread, started
  // at the first such call, watches until the process ends, MPI_Finalize at exit included.
  detail::CallWatchdog& watchdog() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // A worker stopped following a strategy's steps (a step abandoned at its deadline): MPI_Finalize
  // at exit is bounded, as that worker may never come.
  void lose_contact() { lost_contact_.store(true, std::memory_order_release); }

  // Keeps the buffer of a send that was still pending when its transport went: MPI may read it
  // until MPI_Finalize.
  void keep_unreceived(std::unique_ptr<std::byte[]> buffer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Keeps the abandoned requests and buffers of a transport that goes, and drops those of earlier
  // ones that have completed since.
  void keep_abandoned(Abandoned abandoned) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

 private:
  MpiRuntime();
  ~MpiRuntime();
  void finalize_at_exit();

  detail::Mutex mutex_;
  std::unique_ptr<CommunicatorSlots> slots_ ABSL_GUARDED_BY(mutex_);
  std::unique_ptr<detail::CallWatchdog> watchdog_ ABSL_GUARDED_BY(mutex_);
  // This process's rank in MPI_COMM_WORLD, for the watchdog's message (it calls no MPI).
  std::atomic<int> world_rank_{-1};
  std::atomic<bool> lost_contact_{false};
  std::vector<std::unique_ptr<std::byte[]>> unreceived_ ABSL_GUARDED_BY(mutex_);
  // Those of transports that went, not yet complete.
  std::vector<Abandoned> orphaned_ ABSL_GUARDED_BY(mutex_);
};

// Every rank's host name (MPI_Get_processor_name) on `base`, in rank order.
std::vector<std::string> processor_names(MPI_Comm base) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiRuntime::instance().mutex());

// The MPI lock, taken for non-blocking calls only, each of which the watchdog times.
class ABSL_SCOPED_LOCKABLE NonBlockingMpiLock {
 public:
  NonBlockingMpiLock() ABSL_EXCLUSIVE_LOCK_FUNCTION(MpiRuntime::instance().mutex()) {
    MpiRuntime::instance().mutex().lock();
    MpiRuntime::instance().watchdog().enter();
  }
  ~NonBlockingMpiLock() ABSL_UNLOCK_FUNCTION() {
    MpiRuntime::instance().watchdog().leave();
    MpiRuntime::instance().mutex().unlock();
  }
  NonBlockingMpiLock(const NonBlockingMpiLock&) = delete;
  NonBlockingMpiLock& operator=(const NonBlockingMpiLock&) = delete;
};

// Whether every request completed (takes the MPI lock).
bool completed(std::span<MPI_Request> requests);

}  // namespace distribute::cluster::mpi
