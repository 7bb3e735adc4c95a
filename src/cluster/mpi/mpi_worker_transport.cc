// MpiWorkerTransport: MPI initialisation, the communicator slots, the header exchange, and data in pieces.
#include "cluster/mpi/mpi_worker_transport.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/call_watchdog.h"
#include "base/timeline.h"
#include "cluster/worker_group.h"
#include "cluster/ring_all_reduce.h"
#include "device/kernels.h"
#include "distribute/errors.h"

namespace distribute::detail {

Mutex mpi_mutex;

namespace {

// A worker whose data phase stalled asks every other worker whether it is alive (kQueryTag, the
// query's number); a worker that waits in the strategy answers (kAnswerTag, the same number).
constexpr int kQueryTag = 18;
constexpr int kAnswerTag = 19;
// What the first worker to conclude found (text), sent to the others before it ends the job or
// fails its call.
constexpr int kFindingTag = 20;
constexpr int kRingTag = 21;
// A worker that gave up on a step at its deadline tells the others (text: the step).
constexpr int kGaveUpTag = 22;
// How long a stalled worker waits for the answers before it concludes.
constexpr auto kAnswerGrace = std::chrono::seconds(1);


void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw UnavailableError(absl::StrCat(call, " failed: ", std::string(text, static_cast<std::size_t>(length))));
}

// How long one non-blocking MPI call may take before the process ends (call_watchdog.h says why
// one can spin): far beyond any such call's time, even under a sanitizer on a loaded machine.
constexpr auto kStuckCallLimit = std::chrono::seconds(30);
// This process's rank in MPI_COMM_WORLD, for the watchdog's message (it calls no MPI).
std::atomic<int> world_rank{-1};

CallWatchdog& mpi_call_watchdog() {
  static auto* watchdog = new CallWatchdog(kStuckCallLimit, [](std::chrono::milliseconds stuck_for) {
    std::fprintf(stderr,
                 "distribute: process %d (rank %d of MPI_COMM_WORLD) has been inside one non-blocking MPI call for "
                 "%lld s: MPI itself does not return, as when a process on this host was stopped in the middle "
                 "of sending to this one (Open MPI's shared-memory transport then waits for it for ever). No "
                 "timeout reaches a call that does not return: ending this process, and with it the job\n",
                 static_cast<int>(::getpid()), world_rank.load(),
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(stuck_for).count()));
    std::fflush(stderr);
    std::_Exit(EXIT_FAILURE);
  });
  return *watchdog;
}

// The MPI lock, taken for non-blocking calls only, each of which the watchdog times.
class ABSL_SCOPED_LOCKABLE NonBlockingMpiLock {
 public:
  NonBlockingMpiLock() ABSL_EXCLUSIVE_LOCK_FUNCTION(mpi_mutex) {
    mpi_mutex.lock();
    mpi_call_watchdog().enter();
  }
  ~NonBlockingMpiLock() ABSL_UNLOCK_FUNCTION() {
    mpi_call_watchdog().leave();
    mpi_mutex.unlock();
  }
  NonBlockingMpiLock(const NonBlockingMpiLock&) = delete;
  NonBlockingMpiLock& operator=(const NonBlockingMpiLock&) = delete;
};

// Whether every request completed (takes the MPI lock).
bool completed(std::span<MPI_Request> requests) {
  NonBlockingMpiLock lock;
  int flag = 0;
  MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
  return flag != 0;
}

// Polls `done` until it returns true or `deadline` passes; returns whether it did. Sleeps a little
// between polls once the first ones found nothing, so that a waiting worker leaves the cores to
// the replicas still computing; while it sleeps between polls, `idle` runs before each poll.
template <class Done, class Idle>
bool poll_until(Done&& done, Deadline deadline, Idle&& idle) {
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    if (i < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      idle();
    }
  }
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kFloat64: return MPI_DOUBLE;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
    default: break;
  }
  throw InternalError(absl::StrCat("MpiWorkerTransport: no MPI type for ", dtype_name(dtype)));
}

// The buffers of sends that were still pending when their engine went: MPI may read them until
// MPI_Finalize.
std::vector<std::unique_ptr<std::byte[]>>& unreceived_buffers() {
  static auto* buffers = new std::vector<std::unique_ptr<std::byte[]>>();
  return *buffers;
}

// Set when a worker stopped following a strategy's steps (a step abandoned at its deadline).
std::atomic<bool> lost_contact{false};
// How long MPI_Finalize at exit may wait once a worker was lost.
constexpr auto kFinalizeLimit = std::chrono::seconds(5);

void finalize_at_exit() {
  // A timeline still recording is gathered from every worker while MPI still works.
  timeline::stop_at_exit();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (lost_contact.load(std::memory_order_acquire)) {
    // MPI_Finalize waits for every process of the job, and a worker that stopped answering may
    // never come: a program that caught the error and returned must still end.
    std::thread([] {
      std::this_thread::sleep_for(kFinalizeLimit);
      std::fprintf(stderr,
                   "distribute: MPI_Finalize did not return within %lld s (a worker stopped answering earlier); "
                   "exiting without it\n",
                   static_cast<long long>(kFinalizeLimit.count()));
      std::fflush(stderr);
      std::_Exit(EXIT_FAILURE);
    }).detach();
  }
  MPI_Finalize();
}

}  // namespace

void MpiWorkerTransport::give_up_slot() {
  reusable_ = false;
  lost_contact.store(true, std::memory_order_release);
}

void ensure_mpi_initialized() {
  MutexLock lock(mpi_mutex);
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  world_rank.store(rank);
  if (provided < MPI_THREAD_SERIALIZED) {
    throw UnavailableError(
        "MultiWorkerMirroredStrategy: MPI provides less than MPI_THREAD_SERIALIZED; the strategy calls MPI from "
        "its replica threads. Initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let the "
        "strategy initialise it");
  }
}

namespace {

// The communicators of the strategies built on one base communicator, kept for the next ones
// rather than freed: a message still on its way to a destroyed strategy (a worker's last header,
// a note) then arrives where the next strategy on the slot drops it by its nonce. Freed, their
// contexts would go to new communicators, into whose message order Open MPI would mix such a
// message. Slot k is the same pair of communicators on every worker: the workers make slots
// together and pick one together.
struct CommunicatorSlots {
  MPI_Comm base = MPI_COMM_NULL;
  std::vector<std::array<MPI_Comm, 2>> pairs;
  std::vector<char> in_use;
  int on_host = 1;  // the workers on this worker's host
  std::vector<std::string> hosts;  // each worker's host name
};

std::vector<CommunicatorSlots>& communicator_slots() {
  static auto* slots = new std::vector<CommunicatorSlots>();
  return *slots;
}

// The slots of `base` (the caller holds the MPI lock). Every worker must come with as many: when
// they do not (a program freed its base communicator and got another with the same handle on
// some workers), every worker starts a new list.
CommunicatorSlots& slots_of(MPI_Comm base) {
  std::vector<CommunicatorSlots>& all = communicator_slots();
  auto it = std::find_if(all.begin(), all.end(), [&](const CommunicatorSlots& s) { return s.base == base; });
  if (it != all.end() && !it->pairs.empty()) {
    int same = MPI_UNEQUAL;
    MPI_Comm_compare(it->pairs[0][0], base, &same);
    if (same != MPI_CONGRUENT) it = all.erase(it), it = all.end();
  }
  if (it == all.end()) it = all.insert(all.end(), CommunicatorSlots{base, {}, {}});
  std::int64_t counts[2] = {static_cast<std::int64_t>(it->pairs.size()), -static_cast<std::int64_t>(it->pairs.size())};
  check(MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_INT64_T, MPI_MAX, base), "MPI_Allreduce");
  if (counts[0] != -counts[1]) *it = CommunicatorSlots{base, {}, {}};
  return *it;
}

}  // namespace

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

MpiWorkerTransport::MpiWorkerTransport(MPI_Comm base, StalledCollectiveAction on_stall) : on_stall_(on_stall) {
  ensure_mpi_initialized();
  MutexLock lock(mpi_mutex);
  CommunicatorSlots& slots = slots_of(base);
  // The lowest slot free on every worker, else a new one.
  std::vector<char> free(slots.pairs.size());
  for (std::size_t k = 0; k < free.size(); ++k) free[k] = slots.in_use[k] ? 0 : 1;
  if (!free.empty()) {
    check(MPI_Allreduce(MPI_IN_PLACE, free.data(), static_cast<int>(free.size()), MPI_CHAR, MPI_BAND, base),
          "MPI_Allreduce");
  }
  slot_ = static_cast<int>(std::find(free.begin(), free.end(), 1) - free.begin());
  if (slot_ == static_cast<int>(slots.pairs.size())) {
    std::array<MPI_Comm, 2> pair{MPI_COMM_NULL, MPI_COMM_NULL};
    check(MPI_Comm_dup(base, &pair[0]), "MPI_Comm_dup");
    check(MPI_Comm_dup(base, &pair[1]), "MPI_Comm_dup");
    int rank = 0;
    MPI_Comm_rank(base, &rank);
    MPI_Comm host;
    check(MPI_Comm_split_type(base, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
    int on_host = 1;
    MPI_Comm_size(host, &on_host);
    MPI_Comm_free(&host);
    slots.pairs.push_back(pair);
    slots.in_use.push_back(0);
    slots.on_host = on_host;
    slots.hosts = processor_names(base);
  }
  slots.in_use[static_cast<std::size_t>(slot_)] = 1;
  base_ = base;
  comm_ = slots.pairs[static_cast<std::size_t>(slot_)][0];
  probe_comm_ = slots.pairs[static_cast<std::size_t>(slot_)][1];
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  on_host_ = slots.on_host;
  hosts_ = slots.hosts;
  if (rank_ == 0) nonce_ = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  check(MPI_Bcast(&nonce_, 1, MPI_UINT64_T, 0, comm_), "MPI_Bcast");
}

MpiWorkerTransport::~MpiWorkerTransport() {
  NonBlockingMpiLock lock;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  reap_sends();
  // A send no worker will receive (its peer left first) may hold its buffer until MPI_Finalize.
  for (PendingSends& pending : pending_sends_) {
    for (MPI_Request& request : pending.requests) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    }
    unreceived_buffers().push_back(std::move(pending.buffer));
  }
  // An abandoned data phase's requests cannot be freed (MPI forbids it for a non-blocking
  // collective): they and their buffers outlive the transport until they complete, if ever.
  std::vector<Abandoned>& orphans = orphaned();
  if (!abandoned_.requests.empty()) orphans.push_back(std::move(abandoned_));
  std::erase_if(orphans, [](Abandoned& orphan) {
    int done = 0;
    MPI_Testall(static_cast<int>(orphan.requests.size()), orphan.requests.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  });
  // A strategy that abandoned a step may have left the communicators' collectives out of step
  // between the workers: its slot is never used again.
  if (!reusable_) return;
  for (CommunicatorSlots& slots : communicator_slots()) {
    if (slots.base == base_ && static_cast<std::size_t>(slot_) < slots.pairs.size() &&
        slots.pairs[static_cast<std::size_t>(slot_)][0] == comm_) {
      slots.in_use[static_cast<std::size_t>(slot_)] = 0;
    }
  }
}

std::vector<MpiWorkerTransport::Abandoned>& MpiWorkerTransport::orphaned() {
  static auto* orphans = new std::vector<Abandoned>();
  return *orphans;
}

std::unique_ptr<std::byte[]> MpiWorkerTransport::framed(const void* data, std::size_t bytes) const {
  auto out = std::make_unique<std::byte[]>(sizeof nonce_ + bytes);
  std::memcpy(out.get(), &nonce_, sizeof nonce_);
  if (bytes != 0) std::memcpy(out.get() + sizeof nonce_, data, bytes);
  return out;
}

std::optional<MpiWorkerTransport::Message> MpiWorkerTransport::take_message(MPI_Comm comm, int source, int tag) {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(source, tag, comm, &flag, &status);
    if (!flag) return std::nullopt;
    int length = 0;
    MPI_Get_count(&status, MPI_BYTE, &length);
    Message message{status.MPI_SOURCE, std::vector<std::byte>(static_cast<std::size_t>(length))};
    MPI_Recv(message.payload.data(), length, MPI_BYTE, status.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE);
    std::uint64_t nonce = 0;
    if (message.payload.size() < sizeof nonce) continue;
    std::memcpy(&nonce, message.payload.data(), sizeof nonce);
    if (nonce != nonce_) continue;
    message.payload.erase(message.payload.begin(), message.payload.begin() + sizeof nonce);
    return message;
  }
}

void MpiWorkerTransport::reap_sends() {
  std::erase_if(pending_sends_, [](PendingSends& pending) {
    int done = 0;
    MPI_Testall(static_cast<int>(pending.requests.size()), pending.requests.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  });
}

void MpiWorkerTransport::answer_queries() {
  while (const std::optional<Message> query = take_message(probe_comm_, MPI_ANY_SOURCE, kQueryTag)) {
    const std::unique_ptr<std::byte[]> answer = framed(query->payload.data(), query->payload.size());
    // A few bytes go eagerly: the send returns without waiting for the asker.
    MPI_Send(answer.get(), static_cast<int>(sizeof nonce_ + query->payload.size()), MPI_BYTE, query->source,
             kAnswerTag, probe_comm_);
  }
}

MpiWorkerTransport::PendingSends MpiWorkerTransport::send_to_every_worker(int tag, std::span<const std::byte> mine) {
  PendingSends sends{{}, framed(mine.data(), mine.size())};
  NonBlockingMpiLock lock;
  reap_sends();
  for (int w = 0; w < size_; ++w) {
    if (w == rank_) continue;
    sends.requests.emplace_back();
    check(MPI_Isend(sends.buffer.get(), static_cast<int>(sizeof nonce_ + mine.size()), MPI_BYTE, w, tag, comm_,
                    &sends.requests.back()),
          "MPI_Isend");
  }
  return sends;
}

void MpiWorkerTransport::receive_arrived(int tag, std::vector<int>& waiting, std::span<std::byte> all,
                                         std::size_t bytes) {
  std::vector<int> still;
  for (int w : waiting) {
    const std::optional<Message> message = take_message(comm_, w, tag);
    if (!message) {
      still.push_back(w);
      continue;
    }
    if (message->payload.size() != bytes) {
      throw InternalError(absl::StrCat("worker ", w, " sent ", message->payload.size(), " bytes where ", bytes,
                                       " were expected"));
    }
    std::memcpy(all.data() + static_cast<std::size_t>(w) * bytes, message->payload.data(), bytes);
  }
  waiting = std::move(still);
}

std::vector<int> MpiWorkerTransport::exchange_on(int tag, std::span<const std::byte> mine, std::span<std::byte> all,
                                                 Deadline deadline) {
  const std::size_t bytes = mine.size();
  std::memcpy(all.data() + static_cast<std::size_t>(rank_) * bytes, mine.data(), bytes);
  if (size_ == 1) return {};
  // Every message starts with the strategy's nonce, so that one left for an earlier strategy on
  // the same communicators (a worker's last header to a strategy that the others had left, say)
  // is dropped. Messages are probed before they are received, so one of another size never
  // truncates.
  PendingSends sends = send_to_every_worker(tag, mine);
  std::vector<int> waiting;  // peers whose message has not come
  for (int w = 0; w < size_; ++w) {
    if (w != rank_) waiting.push_back(w);
  }
  const bool done = poll_until(
      [&] {
        NonBlockingMpiLock lock;
        receive_arrived(tag, waiting, all, bytes);
        if (!waiting.empty()) return false;
        int sent = 0;
        MPI_Testall(static_cast<int>(sends.requests.size()), sends.requests.data(), &sent, MPI_STATUSES_IGNORE);
        return sent != 0;
      },
      deadline,
      [this] {
        NonBlockingMpiLock lock;
        answer_queries();
      });
  if (done) return {};
  // Abandoned: the sends keep their buffer until they complete (reap_sends).
  NonBlockingMpiLock lock;
  pending_sends_.push_back(std::move(sends));
  give_up_slot();
  return waiting;
}

void MpiWorkerTransport::send_farewell(std::span<const std::byte> mine) {
  if (size_ == 1) return;
  MutexLock lock(mpi_mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A header is small enough to go eagerly: each send returns without the peer receiving it, and
  // a peer that never does (it is leaving too) leaves it unmatched.
  const std::unique_ptr<std::byte[]> message = framed(mine.data(), mine.size());
  for (int w = 0; w < size_; ++w) {
    if (w != rank_) {
      check(MPI_Send(message.get(), static_cast<int>(sizeof nonce_ + mine.size()), MPI_BYTE, w, kHeaderTag, comm_),
            "MPI_Send");
    }
  }
}

void MpiWorkerTransport::send_gave_up(const cluster::StepName& what) {
  give_up_slot();
  if (size_ > 1) {
    const std::string step = what.str();
    send_to_others(step.data(), step.size(), kGaveUpTag);
  }
}

void MpiWorkerTransport::receive_gave_up() {
  while (const std::optional<Message> note = take_message(probe_comm_, MPI_ANY_SOURCE, kGaveUpTag)) {
    gave_up_.emplace_back(note->source, note->text());
  }
}

std::vector<std::pair<int, std::string>> MpiWorkerTransport::take_gave_up() {
  if (size_ == 1) return {};
  NonBlockingMpiLock lock;
  receive_gave_up();
  if (!gave_up_.empty()) give_up_slot();
  return std::exchange(gave_up_, {});
}

void MpiWorkerTransport::leave_if_others_gave_up(const cluster::StepName& what) {
  if (gave_up_.empty()) return;
  // Workers gave up on the step at their deadline after this one's header reached them: they will
  // never join this data phase. When every other worker did, nobody will ever match this worker's
  // requests, and they can be left behind; when some did not, those may already have sent into
  // this worker's buffers, and the step stalled.
  std::vector<char> gone(static_cast<std::size_t>(size_), 0);
  for (const auto& note : gave_up_) gone[static_cast<std::size_t>(note.first)] = 1;
  if (std::count(gone.begin(), gone.end(), 1) == size_ - 1) {
    give_up_slot();
    throw DeadlineExceededError(absl::StrCat("every other worker gave up on ", what.str()));
  }
  std::vector<std::string> notes;
  for (const auto& [worker, step] : gave_up_) notes.push_back(absl::StrCat("worker ", worker, " in ", step));
  stalled(absl::StrCat("worker ", rank_, ": ", absl::StrJoin(notes, ", "),
                       " gave up when its timeout passed, after this worker had agreed to ", what.str(),
                       " and started its data phase with the others"));
}

void MpiWorkerTransport::stalled(const std::string& report) {
  if (on_stall_ == StalledCollectiveAction::kFailStrategy) {
    throw DeadlineExceededError(absl::StrCat(report, "; the strategy is unusable and the job goes on "
                                                     "(StalledCollectiveAction::kFailStrategy)"));
  }
  std::fprintf(stderr, "distribute: %s; ending the job\n", report.c_str());
  std::fflush(stderr);
  MPI_Abort(comm_, 1);
}

std::byte* MpiWorkerTransport::workspace(void* data, std::size_t bytes) {
  if (on_stall_ == StalledCollectiveAction::kEndJob) return static_cast<std::byte*>(data);
  data_scratch_.resize(bytes);
  return data_scratch_.data();
}

void MpiWorkerTransport::abandon(std::span<MPI_Request> requests) {
  NonBlockingMpiLock lock;
  give_up_slot();
  for (MPI_Request request : requests) {
    if (request != MPI_REQUEST_NULL) abandoned_.requests.push_back(request);
  }
  // Moved, the buffers keep their memory, which the caller's pointers into them still name.
  for (std::vector<std::byte>* buffer : {&ring_scratch_, &data_scratch_}) {
    if (buffer->capacity() != 0) abandoned_.buffers.push_back(std::move(*buffer));
  }
}

void MpiWorkerTransport::wait_for_data(std::span<MPI_Request> requests, Deadline deadline, const cluster::StepName& what) {
  try {
    const bool done = poll_until([&] { return completed(requests); }, deadline, [&] {
      NonBlockingMpiLock lock;
      answer_queries();
      receive_gave_up();
      leave_if_others_gave_up(what);
    });
    if (done) return;
    if (const std::optional<std::string> finding = find_stall(requests)) {
      stalled(absl::StrCat("worker ", rank_, ": the data phase of ", what.str(),
                           " stalled past its timeout (every worker had agreed to the collective); ", *finding));
    }
  } catch (...) {
    abandon(requests);
    throw;
  }
}

std::optional<std::string> MpiWorkerTransport::find_stall(std::span<MPI_Request> requests) {
  // Ask every other worker whether it is alive. Those that wait in the strategy answer; one that
  // is stopped, hung or busy elsewhere does not, and is named. The first worker to conclude tells
  // the others its finding before it ends the job or fails its call, since ending the job wakes a
  // stopped worker, which would then answer the others' queries.
  const std::int64_t query = [this] {
    NonBlockingMpiLock lock;
    return ++queries_;
  }();
  std::vector<char> answered(static_cast<std::size_t>(size_), 0);
  answered[static_cast<std::size_t>(rank_)] = 1;
  send_to_others(&query, sizeof query, kQueryTag);
  std::string reported;  // another worker's finding, with its id
  const auto all_answered = [&] {
    return std::all_of(answered.begin(), answered.end(), [](char a) { return a != 0; });
  };
  const bool done = poll_until(
      [&] {
        if (completed(requests)) return true;
        NonBlockingMpiLock lock;
        if (const std::optional<Message> finding = take_message(probe_comm_, MPI_ANY_SOURCE, kFindingTag)) {
          reported = absl::StrCat("worker ", finding->source, " found: ", finding->text());
          return true;
        }
        answer_queries();
        while (const std::optional<Message> reply = take_message(probe_comm_, MPI_ANY_SOURCE, kAnswerTag)) {
          std::int64_t answer_to = 0;
          if (reply->payload.size() != sizeof answer_to) continue;
          std::memcpy(&answer_to, reply->payload.data(), sizeof answer_to);
          if (answer_to == query) answered[static_cast<std::size_t>(reply->source)] = 1;
        }
        return all_answered();
      },
      Clock::now() + kAnswerGrace,
      [this] {
        NonBlockingMpiLock lock;
        answer_queries();
        receive_gave_up();
      });
  if (done && reported.empty() && completed(requests)) return std::nullopt;
  if (!reported.empty()) return reported;
  std::vector<int> silent;
  std::vector<int> waiting;
  for (int w = 0; w < size_; ++w) {
    if (w != rank_) (answered[static_cast<std::size_t>(w)] ? waiting : silent).push_back(w);
  }
  const auto workers = [this](const std::vector<int>& ids) { return cluster::workers_on_hosts(ids, hosts_); };
  std::string finding;
  if (silent.empty()) {
    finding = "every worker answered and waits in it too (the transport is stuck, not a worker)";
  } else {
    finding = absl::StrCat(workers(silent), " did not answer within ",
                           std::chrono::duration_cast<std::chrono::seconds>(kAnswerGrace).count(),
                           " s (stopped, hung, or busy outside the strategy)");
    if (!waiting.empty()) {
      absl::StrAppend(&finding, "; ", workers(waiting), waiting.size() == 1 ? " waits" : " wait", " in it too");
    }
  }
  send_to_others(finding.data(), finding.size(), kFindingTag);
  return finding;
}

void MpiWorkerTransport::send_to_others(const void* data, std::size_t bytes, int tag) {
  // The message outlives this call: a worker that never reads it leaves the send pending. It is
  // small, so it goes eagerly.
  PendingSends sends{{}, framed(data, bytes)};
  NonBlockingMpiLock lock;
  reap_sends();
  for (int w = 0; w < size_; ++w) {
    if (w == rank_) continue;
    sends.requests.emplace_back();
    MPI_Isend(sends.buffer.get(), static_cast<int>(sizeof nonce_ + bytes), MPI_BYTE, w, tag, probe_comm_,
              &sends.requests.back());
  }
  pending_sends_.push_back(std::move(sends));
}

// float16 and bfloat16 cross the workers as float32, MPI having no type for them: each worker's
// sum is widened, the workers' sums are added in float32, and the total is rounded once.
namespace {

template <class T>
void all_reduce_widened(MpiWorkerTransport& engine, void* data, std::int64_t count, Deadline deadline,
                        const cluster::StepName& what) {
  T* values = static_cast<T*>(data);
  std::vector<float> wide(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) wide[static_cast<std::size_t>(i)] = static_cast<float>(values[i]);
  engine.all_reduce(DType::kFloat32, wide.data(), count, deadline, what);
  for (std::int64_t i = 0; i < count; ++i) values[i] = static_cast<T>(wide[static_cast<std::size_t>(i)]);
}

}  // namespace

class MpiWorkerTransport::RingLinks final : public cluster::RingLinks {
 public:
  RingLinks(MpiWorkerTransport& engine, Deadline deadline, const cluster::StepName& what)
      : engine_(engine), deadline_(deadline), what_(what) {}
  int rank() const override { return engine_.rank_; }
  int size() const override { return engine_.size_; }
  void send_next_receive_previous(std::span<const std::byte> to_next, std::span<std::byte> from_previous) override {
    const int next = (engine_.rank_ + 1) % engine_.size_;
    const int previous = (engine_.rank_ + engine_.size_ - 1) % engine_.size_;
    // Each way in messages of at most kRingMessageBytes, all posted at once. One large message
    // each way sometimes crossed at half the link's rate (Open MPI's TCP transport then sent one
    // direction's data before the other's): a 30 MiB exchange between 2 hosts took 263 or 500 ms
    // at 1 Gbit/s, and 263-283 ms in 1 MiB messages.
    std::vector<MPI_Request>& requests = requests_;  // kept across the call's steps: no allocation per step
    requests.clear();
    int posted = MPI_SUCCESS;
    const char* call = "MPI_Irecv";
    {
      NonBlockingMpiLock lock;
      for (std::size_t at = 0; at < from_previous.size() && posted == MPI_SUCCESS; at += kRingMessageBytes) {
        requests.push_back(MPI_REQUEST_NULL);
        posted = MPI_Irecv(from_previous.data() + at, static_cast<int>(std::min(kRingMessageBytes, from_previous.size() - at)),
                           MPI_BYTE, previous, kRingTag, engine_.comm_, &requests.back());
      }
      if (posted == MPI_SUCCESS) call = "MPI_Isend";
      for (std::size_t at = 0; at < to_next.size() && posted == MPI_SUCCESS; at += kRingMessageBytes) {
        requests.push_back(MPI_REQUEST_NULL);
        posted = MPI_Isend(to_next.data() + at, static_cast<int>(std::min(kRingMessageBytes, to_next.size() - at)),
                           MPI_BYTE, next, kRingTag, engine_.comm_, &requests.back());
      }
    }
    if (posted != MPI_SUCCESS) {
      // Those that were posted still reach into the step's buffers.
      engine_.abandon(requests);
      check(posted, call);
    }
    engine_.wait_for_data(requests, deadline_, what_);
  }

 private:
  MpiWorkerTransport& engine_;
  const Deadline deadline_;
  const cluster::StepName& what_;
  std::vector<MPI_Request> requests_;
};

void MpiWorkerTransport::all_reduce(DType dtype, void* data, std::int64_t count, Deadline deadline,
                                const cluster::StepName& what) {
  if (size_ == 1 || count == 0) return;
  if (dtype == DType::kFloat16) return all_reduce_widened<Half>(*this, data, count, deadline, what);
  if (dtype == DType::kBFloat16) return all_reduce_widened<BFloat16>(*this, data, count, deadline, what);
  const MPI_Datatype type = mpi_type(dtype);
  const std::size_t unit = dtype_size(dtype);
  const std::size_t piece = on_stall_ == StalledCollectiveAction::kEndJob ? kMaxRingBytesPerCall : kMaxBytesPerCall;
  const auto per_call = static_cast<std::int64_t>(piece / unit);
  auto* bytes = static_cast<std::byte*>(data);
  RingLinks ring(*this, deadline, what);
  for (std::int64_t at = 0; at < count; at += per_call) {
    const std::int64_t n = std::min(per_call, count - at);
    std::byte* part = bytes + static_cast<std::size_t>(at) * unit;
    const std::size_t part_bytes = static_cast<std::size_t>(n) * unit;
    std::byte* work = workspace(part, part_bytes);
    if (work != part) std::memcpy(work, part, part_bytes);
    if (part_bytes >= kMinRingBytes) {
      cluster::ring_all_reduce(ring, dtype, work, n, ring_scratch_);
    } else {
      MPI_Request request;
      {
        NonBlockingMpiLock lock;
        check(MPI_Iallreduce(MPI_IN_PLACE, work, static_cast<int>(n), type, MPI_SUM, comm_, &request),
              "MPI_Iallreduce");
      }
      wait_for_data(std::span(&request, 1), deadline, what);
    }
    if (work != part) std::memcpy(part, work, part_bytes);
  }
}

void MpiWorkerTransport::all_gather(const void* mine, std::span<const std::size_t> sizes, void* out, Deadline deadline,
                                const cluster::StepName& what) {
  std::vector<int> counts;
  std::vector<int> displacements;
  std::size_t total = 0;
  for (std::size_t s : sizes) {
    if (total + s > static_cast<std::size_t>(INT_MAX)) {
      throw UnimplementedError(absl::StrCat(what.str(), ": gathering more than 2 GiB across workers is not supported"));
    }
    counts.push_back(static_cast<int>(s));
    displacements.push_back(static_cast<int>(total));
    total += s;
  }
  if (size_ == 1) {
    if (total != 0) std::memcpy(out, mine, total);
    return;
  }
  const auto me = static_cast<std::size_t>(rank_);
  std::byte* work = workspace(out, total);
  const void* from = mine;
  if (work != out) {
    // This worker's part goes where the others' will: MPI_IN_PLACE, so that MPI reads no
    // caller's memory either.
    if (counts[me] != 0) std::memcpy(work + displacements[me], mine, sizes[me]);
    from = MPI_IN_PLACE;
  }
  MPI_Request request;
  {
    NonBlockingMpiLock lock;
    check(MPI_Iallgatherv(from, counts[me], MPI_BYTE, work, counts.data(), displacements.data(), MPI_BYTE, comm_,
                          &request),
          "MPI_Iallgatherv");
  }
  wait_for_data(std::span(&request, 1), deadline, what);
  if (work != out && total != 0) std::memcpy(out, work, total);
}

void MpiWorkerTransport::broadcast(void* data, std::size_t bytes, int root, Deadline deadline, const cluster::StepName& what) {
  if (size_ == 1) return;
  auto* at = static_cast<std::byte*>(data);
  for (std::size_t done = 0; done < bytes; done += kMaxBytesPerCall) {
    const std::size_t n = std::min(kMaxBytesPerCall, bytes - done);
    std::byte* part = at + done;
    std::byte* work = workspace(part, n);
    if (work != part && rank_ == root) std::memcpy(work, part, n);
    MPI_Request request;
    {
      NonBlockingMpiLock lock;
      check(MPI_Ibcast(work, static_cast<int>(n), MPI_BYTE, root, comm_, &request), "MPI_Ibcast");
    }
    wait_for_data(std::span(&request, 1), deadline, what);
    if (work != part && rank_ != root) std::memcpy(part, work, n);
  }
}

}  // namespace distribute::detail
