// StallDetector: liveness queries, the stall report, and the requests of abandoned data phases.
#include "cluster/mpi/stall_detector.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cluster/worker_group.h"
#include "distribute/errors.h"

namespace distribute::cluster::mpi {

namespace {

// How long a stalled worker waits for the answers before it concludes.
constexpr auto kAnswerGrace = std::chrono::seconds(1);

}  // namespace

void StallDetector::reply_to_queries() {
  while (const std::optional<MpiControlChannel::Message> query =
             control_.take_message(slot_.probe_comm(), MPI_ANY_SOURCE, kQueryTag)) {
    const std::unique_ptr<std::byte[]> answer = control_.framed(query->payload.data(), query->payload.size());
    // A few bytes go eagerly: the send returns without waiting for the asker.
    MPI_Send(answer.get(), static_cast<int>(MpiControlChannel::kNonceBytes + query->payload.size()), MPI_BYTE,
             query->source, kAnswerTag, slot_.probe_comm());
  }
}

void StallDetector::answer_queries() {
  NonBlockingMpiLock lock;
  reply_to_queries();
}

void StallDetector::leave() {
  // An abandoned data phase's requests cannot be freed (MPI forbids it for a non-blocking
  // collective): they and their buffers outlive the transport until they complete, if ever.
  MpiRuntime::instance().keep_abandoned(std::move(abandoned_));
}

void StallDetector::leave_if_others_gave_up(const StepName& what) {
  const std::vector<std::pair<int, std::string>>& gave_up = control_.gave_up();
  if (gave_up.empty()) return;
  // Workers gave up on the step at their deadline after this one's header reached them: they will
  // never join this data phase. When every other worker did, nobody will ever match this worker's
  // requests, and they can be left behind; when some did not, those may already have sent into
  // this worker's buffers, and the step stalled.
  std::vector<char> gone(static_cast<std::size_t>(slot_.size()), 0);
  for (const auto& note : gave_up) gone[static_cast<std::size_t>(note.first)] = 1;
  if (std::count(gone.begin(), gone.end(), 1) == slot_.size() - 1) {
    slot_.give_up();
    throw DeadlineExceededError(absl::StrCat("every other worker gave up on ", what.str()));
  }
  std::vector<std::string> notes;
  for (const auto& [worker, step] : gave_up) notes.push_back(absl::StrCat("worker ", worker, " in ", step));
  stalled(absl::StrCat("worker ", slot_.rank(), ": ", absl::StrJoin(notes, ", "),
                       " gave up when its timeout passed, after this worker had agreed to ", what.str(),
                       " and started its data phase with the others"));
}

void StallDetector::stalled(const std::string& report) {
  if (on_stall_ == OnStall::kFailStrategy) {
    throw DeadlineExceededError(absl::StrCat(report, "; the strategy is unusable and the job goes on "
                                                     "(StalledCollectiveAction::kFailStrategy)"));
  }
  std::fprintf(stderr, "distribute: %s; ending the job\n", report.c_str());
  std::fflush(stderr);
  MPI_Abort(slot_.comm(), 1);
}

void StallDetector::abandon(std::span<MPI_Request> requests, std::initializer_list<std::vector<std::byte>*> buffers) {
  NonBlockingMpiLock lock;
  slot_.give_up();
  for (MPI_Request request : requests) {
    if (request != MPI_REQUEST_NULL) abandoned_.requests.push_back(request);
  }
  // Moved, the buffers keep their memory, which the caller's pointers into them still name.
  for (std::vector<std::byte>* buffer : buffers) {
    if (buffer->capacity() != 0) abandoned_.buffers.push_back(std::move(*buffer));
  }
}

void StallDetector::wait_for_data(std::span<MPI_Request> requests, detail::Deadline deadline, const StepName& what) {
  const bool done = detail::poll_until([&] { return completed(requests); }, deadline, [&] {
    NonBlockingMpiLock lock;
    reply_to_queries();
    control_.receive_gave_up();
    leave_if_others_gave_up(what);
  });
  if (done) return;
  if (const std::optional<std::string> finding = find_stall(requests)) {
    stalled(absl::StrCat("worker ", slot_.rank(), ": the data phase of ", what.str(),
                         " stalled past its timeout (every worker had agreed to the collective); ", *finding));
  }
}

std::optional<std::string> StallDetector::find_stall(std::span<MPI_Request> requests) {
  // Ask every other worker whether it is alive. Those that wait in the strategy answer; one that
  // is stopped, hung or busy elsewhere does not, and is named. The first worker to conclude tells
  // the others its finding before it ends the job or fails its call, since ending the job wakes a
  // stopped worker, which would then answer the others' queries.
  const std::int64_t query = [this] {
    NonBlockingMpiLock lock;
    return ++queries_;
  }();
  const int size = slot_.size();
  const int rank = slot_.rank();
  std::vector<char> answered(static_cast<std::size_t>(size), 0);
  answered[static_cast<std::size_t>(rank)] = 1;
  control_.send_to_others(&query, sizeof query, kQueryTag);
  std::string reported;  // another worker's finding, with its id
  const auto all_answered = [&] {
    return std::all_of(answered.begin(), answered.end(), [](char a) { return a != 0; });
  };
  const bool done = detail::poll_until(
      [&] {
        if (completed(requests)) return true;
        NonBlockingMpiLock lock;
        if (const std::optional<MpiControlChannel::Message> finding =
                control_.take_message(slot_.probe_comm(), MPI_ANY_SOURCE, kFindingTag)) {
          reported = absl::StrCat("worker ", finding->source, " found: ", finding->text());
          return true;
        }
        reply_to_queries();
        while (const std::optional<MpiControlChannel::Message> reply =
                   control_.take_message(slot_.probe_comm(), MPI_ANY_SOURCE, kAnswerTag)) {
          std::int64_t answer_to = 0;
          if (reply->payload.size() != sizeof answer_to) continue;
          std::memcpy(&answer_to, reply->payload.data(), sizeof answer_to);
          if (answer_to == query) answered[static_cast<std::size_t>(reply->source)] = 1;
        }
        return all_answered();
      },
      detail::Clock::now() + kAnswerGrace,
      [this] {
        NonBlockingMpiLock lock;
        reply_to_queries();
        control_.receive_gave_up();
      });
  if (done && reported.empty() && completed(requests)) return std::nullopt;
  if (!reported.empty()) return reported;
  std::vector<int> silent;
  std::vector<int> waiting;
  for (int w = 0; w < size; ++w) {
    if (w != rank) (answered[static_cast<std::size_t>(w)] ? waiting : silent).push_back(w);
  }
  const auto workers = [this](const std::vector<int>& ids) { return workers_on_hosts(ids, slot_.hosts()); };
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
  control_.send_to_others(finding.data(), finding.size(), kFindingTag);
  return finding;
}

}  // namespace distribute::cluster::mpi
