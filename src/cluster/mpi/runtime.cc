// MpiRuntime: MPI's initialisation and bounded finalisation, the MPI lock and its watchdog, and
// what outlives the transports until MPI_Finalize.
#include "cluster/mpi/runtime.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/timeline.h"
#include "cluster/mpi/communicator_slots.h"
#include "distribute/errors.h"

namespace distribute::cluster::mpi {

namespace {

// How long one non-blocking MPI call may take before the process ends (call_watchdog.h says why
// one can spin): far beyond any such call's time, even under a sanitizer on a loaded machine.
constexpr auto kStuckCallLimit = std::chrono::seconds(30);
// How long MPI_Finalize at exit may wait once a worker was lost.
constexpr auto kFinalizeLimit = std::chrono::seconds(5);

}  // namespace

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw UnavailableError(absl::StrCat(call, " failed: ", std::string(text, static_cast<std::size_t>(length))));
}

MpiRuntime& MpiRuntime::instance() {
  static auto* runtime = new MpiRuntime();
  return *runtime;
}

MpiRuntime::MpiRuntime() : slots_(std::make_unique<CommunicatorSlots>()) {}

MpiRuntime::~MpiRuntime() = default;

void MpiRuntime::ensure_initialized() {
  detail::MutexLock lock(mutex_);
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    std::atexit([] { instance().finalize_at_exit(); });
  } else {
    MPI_Query_thread(&provided);
  }
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  world_rank_.store(rank);
  if (provided < MPI_THREAD_SERIALIZED) {
    throw UnavailableError(
        "MultiWorkerMirroredStrategy: MPI provides less than MPI_THREAD_SERIALIZED; the strategy calls MPI from "
        "its replica threads. Initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let the "
        "strategy initialise it");
  }
}

detail::CallWatchdog& MpiRuntime::watchdog() {
  if (watchdog_ == nullptr) {
    watchdog_ = std::make_unique<detail::CallWatchdog>(kStuckCallLimit, [this](std::chrono::milliseconds stuck_for) {
      std::fprintf(stderr,
                   "distribute: process %d (rank %d of MPI_COMM_WORLD) has been inside one non-blocking MPI call for "
                   "%lld s: MPI itself does not return, as when a process on this host was stopped in the middle "
                   "of sending to this one (Open MPI's shared-memory transport then waits for it for ever). No "
                   "timeout reaches a call that does not return: ending this process, and with it the job\n",
                   static_cast<int>(::getpid()), world_rank_.load(),
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(stuck_for).count()));
      std::fflush(stderr);
      std::_Exit(EXIT_FAILURE);
    });
  }
  return *watchdog_;
}

void MpiRuntime::keep_unreceived(std::unique_ptr<std::byte[]> buffer) { unreceived_.push_back(std::move(buffer)); }

void MpiRuntime::keep_abandoned(Abandoned abandoned) {
  if (!abandoned.requests.empty()) orphaned_.push_back(std::move(abandoned));
  std::erase_if(orphaned_, [](Abandoned& orphan) {
    int done = 0;
    MPI_Testall(static_cast<int>(orphan.requests.size()), orphan.requests.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  });
}

void MpiRuntime::finalize_at_exit() {
  // A timeline still recording is gathered from every worker while MPI still works.
  detail::timeline::stop_at_exit();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (!lost_contact_.load(std::memory_order_acquire)) {
    MPI_Finalize();
    return;
  }
  // MPI_Finalize waits for every process of the job, and a worker that stopped answering may
  // never come: a program that caught the error and returned must still end. A thread ends the
  // process if MPI_Finalize has not returned within the limit; once it has, the thread is joined.
  std::mutex returned_mutex;
  std::condition_variable returned_changed;
  bool returned = false;
  std::thread bound([&] {
    std::unique_lock lock(returned_mutex);
    if (returned_changed.wait_for(lock, kFinalizeLimit, [&] { return returned; })) return;
    std::fprintf(stderr,
                 "distribute: MPI_Finalize did not return within %lld s (a worker stopped answering earlier); "
                 "exiting without it\n",
                 static_cast<long long>(kFinalizeLimit.count()));
    std::fflush(stderr);
    std::_Exit(EXIT_FAILURE);
  });
  MPI_Finalize();
  {
    std::lock_guard lock(returned_mutex);
    returned = true;
  }
  returned_changed.notify_one();
  bound.join();
}

std::vector<std::string> processor_names(MPI_Comm base) {
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(mine, &length);
  int size = 1;
  MPI_Comm_size(base, &size);
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  check(MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, base),
        "MPI_Allgather");
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) {
    const char* name = all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    names.emplace_back(name, strnlen(name, MPI_MAX_PROCESSOR_NAME));
  }
  return names;
}

bool completed(std::span<MPI_Request> requests) {
  NonBlockingMpiLock lock;
  int flag = 0;
  MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
  return flag != 0;
}

}  // namespace distribute::cluster::mpi
