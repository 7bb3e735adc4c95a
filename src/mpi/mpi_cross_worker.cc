// MpiCrossWorker: MPI initialisation, the header exchange, and data in pieces.
#include "mpi/mpi_cross_worker.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/ring/ring_all_reduce.h"
#include "device/kernels.h"
#include "distribute/errors.h"

namespace distribute::detail {
namespace {

// A worker whose data phase stalled asks every other worker whether it is alive (kQueryTag, the
// query's number); a worker that waits in the strategy answers (kAnswerTag, the same number).
constexpr int kQueryTag = 18;
constexpr int kAnswerTag = 19;
// What the first worker to conclude found (text), sent to the others before it ends the job.
constexpr int kFindingTag = 20;
constexpr int kRingTag = 21;
// A worker that gave up on a step at its deadline tells the others (text: the step).
constexpr int kGaveUpTag = 22;
// How long a stalled worker waits for the answers before it ends the job.
constexpr auto kAnswerGrace = std::chrono::seconds(1);

// Calls into MPI from several threads (several strategies, or the caller and a replica thread)
// are serialised here, so that MPI_THREAD_SERIALIZED suffices.
std::mutex& mpi_mutex() {
  static std::mutex mu;
  return mu;
}

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw UnavailableError(absl::StrCat(call, " failed: ", std::string(text, static_cast<std::size_t>(length))));
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
  throw InternalError(absl::StrCat("MpiCrossWorker: no MPI type for ", dtype_name(dtype)));
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

void ensure_mpi_initialized() {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw UnavailableError(
        "MultiWorkerMirroredStrategy: MPI provides less than MPI_THREAD_SERIALIZED; the strategy calls MPI from "
        "its replica threads. Initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let the "
        "strategy initialise it");
  }
}

MpiCrossWorker::MpiCrossWorker(MPI_Comm base) {
  ensure_mpi_initialized();
  std::lock_guard<std::mutex> lock(mpi_mutex());
  check(MPI_Comm_dup(base, &comm_), "MPI_Comm_dup");
  check(MPI_Comm_dup(base, &probe_comm_), "MPI_Comm_dup");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm host;
  check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
  MPI_Comm_size(host, &on_host_);
  MPI_Comm_free(&host);
}

// The communicators are left to MPI_Finalize. A worker that leaves sends its last header
// without waiting for it to be received (send_last), and Open MPI hands the context of a freed
// communicator on to the next one created, which would then take a header still on its way to
// the old strategy for one of its own: a new strategy built after a worker left the old one would
// hear that the worker left. Two communicators per strategy built is the price.
MpiCrossWorker::~MpiCrossWorker() = default;

void MpiCrossWorker::answer_queries() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, probe_comm_, &flag, &status);
    if (!flag) return;
    std::int64_t query = 0;
    MPI_Recv(&query, sizeof query, MPI_BYTE, status.MPI_SOURCE, kQueryTag, probe_comm_, MPI_STATUS_IGNORE);
    // Eight bytes go eagerly: the send returns without waiting for the asker.
    MPI_Send(&query, sizeof query, MPI_BYTE, status.MPI_SOURCE, kAnswerTag, probe_comm_);
  }
}

std::vector<int> MpiCrossWorker::exchange_on(int tag, std::span<const std::byte> mine, std::span<std::byte> all,
                                             Deadline deadline) {
  const std::size_t bytes = mine.size();
  std::memcpy(all.data() + static_cast<std::size_t>(rank_) * bytes, mine.data(), bytes);
  if (size_ == 1) return {};
  // Receives first (index w' for each peer), then sends; the send buffer outlives an abandoned
  // exchange, whose requests MPI may still complete.
  auto outgoing = std::make_unique<std::byte[]>(bytes);
  std::memcpy(outgoing.get(), mine.data(), bytes);
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    for (int w = 0; w < size_; ++w) {
      if (w == rank_) continue;
      requests.emplace_back();
      peers.push_back(w);
      check(MPI_Irecv(all.data() + static_cast<std::size_t>(w) * bytes, static_cast<int>(bytes), MPI_BYTE, w,
                      tag, comm_, &requests.back()),
            "MPI_Irecv");
    }
    for (int w = 0; w < size_; ++w) {
      if (w == rank_) continue;
      requests.emplace_back();
      check(MPI_Isend(outgoing.get(), static_cast<int>(bytes), MPI_BYTE, w, tag, comm_, &requests.back()),
            "MPI_Isend");
    }
  }
  const bool done = poll_until(
      [&] {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        int flag = 0;
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
        return flag != 0;
      },
      deadline,
      [this] {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        answer_queries();
      });
  if (done) return {};
  std::vector<int> missing;
  std::lock_guard<std::mutex> lock(mpi_mutex());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    if (i < peers.size()) {
      int flag = 0;
      MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE);
      if (flag) continue;
      missing.push_back(peers[i]);
      MPI_Cancel(&requests[i]);
    }
    MPI_Request_free(&requests[i]);
  }
  abandoned_.push_back(std::move(outgoing));
  return missing;
}

void MpiCrossWorker::send_last(std::span<const std::byte> mine) {
  if (size_ == 1) return;
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A header is small enough to go eagerly: each send returns without the peer receiving it, and
  // a peer that never does (it is leaving too) leaves it unmatched.
  for (int w = 0; w < size_; ++w) {
    if (w != rank_) check(MPI_Send(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, w, kHeaderTag, comm_), "MPI_Send");
  }
}

void MpiCrossWorker::send_gave_up(const std::string& what) {
  if (size_ > 1) send_to_others(what.data(), what.size(), kGaveUpTag);
}

void MpiCrossWorker::receive_gave_up() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kGaveUpTag, probe_comm_, &flag, &status);
    if (!flag) return;
    int length = 0;
    MPI_Get_count(&status, MPI_BYTE, &length);
    std::string step(static_cast<std::size_t>(length), '\0');
    MPI_Recv(step.data(), length, MPI_BYTE, status.MPI_SOURCE, kGaveUpTag, probe_comm_, MPI_STATUS_IGNORE);
    gave_up_.emplace_back(status.MPI_SOURCE, std::move(step));
  }
}

std::vector<std::pair<int, std::string>> MpiCrossWorker::take_gave_up() {
  if (size_ == 1) return {};
  std::lock_guard<std::mutex> lock(mpi_mutex());
  receive_gave_up();
  return std::exchange(gave_up_, {});
}

void MpiCrossWorker::wait_or_abort(std::span<MPI_Request> requests, Deadline deadline, const std::string& what) {
  const auto test = [&] {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    int flag = 0;
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE);
    return flag != 0;
  };
  const auto answer = [this] {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    answer_queries();
    receive_gave_up();
  };
  if (poll_until(test, deadline, [&] {
        answer();
        if (gave_up_.empty()) return;
        // Workers gave up on the step at their deadline after this one's header reached them:
        // they will never join this data phase. When every other worker did, nobody will ever
        // match this worker's requests, and they can be left behind; when some did not, those may
        // already have sent into this worker's buffers, and the job must end.
        std::vector<char> gone(static_cast<std::size_t>(size_), 0);
        for (const auto& note : gave_up_) gone[static_cast<std::size_t>(note.first)] = 1;
        if (std::count(gone.begin(), gone.end(), 1) == size_ - 1) {
          throw DeadlineExceededError(absl::StrCat("every other worker gave up on ", what));
        }
        std::vector<std::string> notes;
        for (const auto& [worker, step] : gave_up_) notes.push_back(absl::StrCat("worker ", worker, " in ", step));
        std::fprintf(stderr,
                     "distribute: worker %d: %s gave up when its timeout passed, after this worker had agreed to %s "
                     "and started its data phase with the others; ending the job\n",
                     rank_, absl::StrJoin(notes, ", ").c_str(), what.c_str());
        std::fflush(stderr);
        MPI_Abort(comm_, 1);
      })) {
    return;
  }
  // Past the deadline: ask every other worker whether it is alive. Those that wait in the
  // strategy answer; one that is stopped, hung or busy elsewhere does not, and is named. The first
  // worker to conclude tells the others its finding before it ends the job, since ending it wakes
  // a stopped worker, which would then answer the others' queries.
  const std::int64_t query = ++queries_;
  std::vector<char> answered(static_cast<std::size_t>(size_), 0);
  answered[static_cast<std::size_t>(rank_)] = 1;
  send_to_others(&query, sizeof query, kQueryTag);
  std::string reported;  // another worker's finding, with its id
  const auto all_answered = [&] {
    return std::all_of(answered.begin(), answered.end(), [](char a) { return a != 0; });
  };
  const bool done = poll_until(
      [&] {
        if (test()) return true;
        std::lock_guard<std::mutex> lock(mpi_mutex());
        int flag = 0;
        MPI_Status status;
        MPI_Iprobe(MPI_ANY_SOURCE, kFindingTag, probe_comm_, &flag, &status);
        if (flag) {
          int length = 0;
          MPI_Get_count(&status, MPI_CHAR, &length);
          std::string finding(static_cast<std::size_t>(length), '\0');
          MPI_Recv(finding.data(), length, MPI_CHAR, status.MPI_SOURCE, kFindingTag, probe_comm_, MPI_STATUS_IGNORE);
          reported = absl::StrCat("worker ", status.MPI_SOURCE, " found: ", finding);
          return true;
        }
        answer_queries();
        for (;;) {
          MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, probe_comm_, &flag, &status);
          if (!flag) break;
          std::int64_t answer_to = 0;
          MPI_Recv(&answer_to, sizeof answer_to, MPI_BYTE, status.MPI_SOURCE, kAnswerTag, probe_comm_, MPI_STATUS_IGNORE);
          if (answer_to == query) answered[static_cast<std::size_t>(status.MPI_SOURCE)] = 1;
        }
        return all_answered();
      },
      Clock::now() + kAnswerGrace, answer);
  if (done && reported.empty() && test()) return;
  std::string finding = reported;
  if (finding.empty()) {
    std::vector<int> silent;
    std::vector<int> waiting;
    for (int w = 0; w < size_; ++w) {
      if (w != rank_) (answered[static_cast<std::size_t>(w)] ? waiting : silent).push_back(w);
    }
    const auto workers = [](const std::vector<int>& ids) {
      return absl::StrCat(ids.size() == 1 ? "worker " : "workers ", absl::StrJoin(ids, ", "));
    };
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
  }
  std::fprintf(stderr,
               "distribute: worker %d: the data phase of %s stalled past its timeout (every worker had agreed to "
               "the collective); %s; ending the job\n",
               rank_, what.c_str(), finding.c_str());
  std::fflush(stderr);
  MPI_Abort(comm_, 1);
}

void MpiCrossWorker::send_to_others(const void* data, std::size_t bytes, int tag) {
  // The message outlives this call: a worker that never reads it leaves the send pending. It is
  // small, so it goes eagerly.
  auto outgoing = std::make_unique<std::byte[]>(bytes);
  std::memcpy(outgoing.get(), data, bytes);
  std::lock_guard<std::mutex> lock(mpi_mutex());
  for (int w = 0; w < size_; ++w) {
    if (w == rank_) continue;
    MPI_Request sent;
    MPI_Isend(outgoing.get(), static_cast<int>(bytes), MPI_BYTE, w, tag, probe_comm_, &sent);
    MPI_Request_free(&sent);
  }
  abandoned_.push_back(std::move(outgoing));
}

// float16 and bfloat16 cross the workers as float32, MPI having no type for them: each worker's
// sum is widened, the workers' sums are added in float32, and the total is rounded once.
namespace {

template <class T>
void all_reduce_widened(MpiCrossWorker& engine, void* data, std::int64_t count, Deadline deadline,
                        const std::string& what) {
  T* values = static_cast<T*>(data);
  std::vector<float> wide(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) wide[static_cast<std::size_t>(i)] = static_cast<float>(values[i]);
  engine.all_reduce(DType::kFloat32, wide.data(), count, deadline, what);
  for (std::int64_t i = 0; i < count; ++i) values[i] = static_cast<T>(wide[static_cast<std::size_t>(i)]);
}

}  // namespace

class MpiCrossWorker::RingLinks final : public collective::RingLinks {
 public:
  RingLinks(MpiCrossWorker& engine, Deadline deadline, const std::string& what)
      : engine_(engine), deadline_(deadline), what_(what) {}
  int rank() const override { return engine_.rank_; }
  int size() const override { return engine_.size_; }
  void send_next_receive_previous(std::span<const std::byte> to_next, std::span<std::byte> from_previous) override {
    const int next = (engine_.rank_ + 1) % engine_.size_;
    const int previous = (engine_.rank_ + engine_.size_ - 1) % engine_.size_;
    MPI_Request requests[2];
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      check(MPI_Irecv(from_previous.data(), static_cast<int>(from_previous.size()), MPI_BYTE, previous, kRingTag,
                      engine_.comm_, &requests[0]),
            "MPI_Irecv");
      check(MPI_Isend(to_next.data(), static_cast<int>(to_next.size()), MPI_BYTE, next, kRingTag, engine_.comm_,
                      &requests[1]),
            "MPI_Isend");
    }
    engine_.wait_or_abort(requests, deadline_, what_);
  }

 private:
  MpiCrossWorker& engine_;
  const Deadline deadline_;
  const std::string& what_;
};

void MpiCrossWorker::all_reduce(DType dtype, void* data, std::int64_t count, Deadline deadline,
                                const std::string& what) {
  if (size_ == 1 || count == 0) return;
  if (dtype == DType::kFloat16) return all_reduce_widened<Half>(*this, data, count, deadline, what);
  if (dtype == DType::kBFloat16) return all_reduce_widened<BFloat16>(*this, data, count, deadline, what);
  const MPI_Datatype type = mpi_type(dtype);
  const std::size_t unit = dtype_size(dtype);
  const auto per_call = static_cast<std::int64_t>(kMaxBytesPerCall / unit);
  auto* bytes = static_cast<std::byte*>(data);
  RingLinks ring(*this, deadline, what);
  for (std::int64_t at = 0; at < count; at += per_call) {
    const std::int64_t n = std::min(per_call, count - at);
    std::byte* part = bytes + static_cast<std::size_t>(at) * unit;
    if (static_cast<std::size_t>(n) * unit >= kMinRingBytes) {
      collective::ring_all_reduce(ring, dtype, part, n, ring_scratch_);
      continue;
    }
    MPI_Request request;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      check(MPI_Iallreduce(MPI_IN_PLACE, part, static_cast<int>(n), type, MPI_SUM, comm_, &request), "MPI_Iallreduce");
    }
    wait_or_abort(std::span(&request, 1), deadline, what);
  }
}

void MpiCrossWorker::all_gather(const void* mine, std::span<const std::size_t> sizes, void* out, Deadline deadline,
                                const std::string& what) {
  std::vector<int> counts;
  std::vector<int> displacements;
  std::size_t total = 0;
  for (std::size_t s : sizes) {
    if (total + s > static_cast<std::size_t>(INT_MAX)) {
      throw UnimplementedError(absl::StrCat(what, ": gathering more than 2 GiB across workers is not supported"));
    }
    counts.push_back(static_cast<int>(s));
    displacements.push_back(static_cast<int>(total));
    total += s;
  }
  if (size_ == 1) {
    if (total != 0) std::memcpy(out, mine, total);
    return;
  }
  MPI_Request request;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check(MPI_Iallgatherv(mine, counts[static_cast<std::size_t>(rank_)], MPI_BYTE, out, counts.data(),
                          displacements.data(), MPI_BYTE, comm_, &request),
          "MPI_Iallgatherv");
  }
  wait_or_abort(std::span(&request, 1), deadline, what);
}

void MpiCrossWorker::broadcast(void* data, std::size_t bytes, int root, Deadline deadline, const std::string& what) {
  if (size_ == 1) return;
  auto* at = static_cast<std::byte*>(data);
  for (std::size_t done = 0; done < bytes; done += kMaxBytesPerCall) {
    const std::size_t n = std::min(kMaxBytesPerCall, bytes - done);
    MPI_Request request;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      check(MPI_Ibcast(at + done, static_cast<int>(n), MPI_BYTE, root, comm_, &request), "MPI_Ibcast");
    }
    wait_or_abort(std::span(&request, 1), deadline, what);
  }
}

}  // namespace distribute::detail
