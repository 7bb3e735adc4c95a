// Coordinator: the vote before every cross-worker step and the errors built from it, the chief's
// values and the input's reports.
#include "cluster/coordinator.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cluster/wire.h"
#include "distribute/errors.h"

namespace distribute::cluster {

Coordinator::Coordinator(std::unique_ptr<WorkerTransport> transport, int num_local_replicas)
    : group_(std::move(transport), num_local_replicas) {}

void Coordinator::leave() {
  if (left_.exchange(true) || !group_.usable()) return;
  const Header last{static_cast<std::uint32_t>(Status::kLeft), 0, 0, 0, 0};
  try {
    transport().send_farewell(std::as_bytes(std::span(&last, 1)));
  } catch (...) {
    // Nobody can be told: the others' timeouts still end their wait.
  }
}

std::string Coordinator::broadcast_from_chief(std::string bytes, std::chrono::duration<double> timeout,
                                              const StepName& what) {
  std::uint64_t size = is_chief() ? bytes.size() : 0;
  group_.broadcast(&size, sizeof size, 0, timeout, what);
  bytes.resize(size);
  if (size != 0) group_.broadcast(bytes.data(), size, 0, timeout, what);
  return bytes;
}

void Coordinator::broadcast_outcome_from_chief(std::exception_ptr chief_error, std::chrono::duration<double> timeout,
                                               const StepName& what) {
  const std::string outcome =
      broadcast_from_chief(encode_error(chief_error, -1, absl::StatusCode::kInternal), timeout, what);
  if (chief_error) std::rethrow_exception(chief_error);
  const std::optional<WireError> error = decode_error(outcome);
  if (!error) throw InternalError(absl::StrCat("the chief's report of ", what.str(), " does not parse: ", outcome));
  if (error->code != absl::StatusCode::kOk) {
    throw_status(absl::Status(error->code, absl::StrCat("worker 0, the chief, failed: ", error->message)));
  }
}

std::vector<int> Coordinator::exchange_reports(std::span<const std::byte> mine, std::span<std::byte> all,
                                                     detail::Deadline deadline) {
  return reports_exchanged(transport().exchange_input(mine, all, deadline));
}

std::vector<int> Coordinator::exchange_report_bytes(const std::string& mine, std::vector<std::string>& all,
                                                   detail::Deadline deadline) {
  return reports_exchanged(exchange_sized([&](std::span<const std::byte> part, std::span<std::byte> parts) {
    return transport().exchange_input(part, parts, deadline);
  }, mine, num_workers(), all));
}

std::vector<int> Coordinator::reports_exchanged(std::vector<int> missing) {
  // A report that comes late would be taken for a later one's, and the transport may have failed
  // its pairs: the workers cannot go on together, as after a vote a worker missed.
  if (!missing.empty()) {
    group_.make_unusable(absl::StrCat(group_.workers_text(missing), " did not send ", this_worker(),
                                      " a report (a distributed dataset's step, or the timeline's clocks) in time"));
  }
  return missing;
}

void Coordinator::time_out(const Ballot& mine, const std::vector<int>& missing) {
  const std::string what = mine.status == Status::kCall    ? mine.name()
                           : mine.status == Status::kReturned ? "the end of the replica function"
                                                                          : "the report of a failed run";
  std::string message = absl::StrCat("timed out after ", mine.timeout.count(), " s: ",
                                     group_.workers_text(missing), " did not arrive while ", this_worker(),
                                     " waits in ", what, "; a worker is stuck, slow or skipped the collective");
  group_.make_unusable(message);
  {
    detail::MutexLock lock(missing_mu_);
    missing_at_timeout_ = missing;
  }
  transport().send_gave_up(what);
  throw DeadlineExceededError(message);
}

std::vector<int> Coordinator::missing_at_timeout() const {
  detail::MutexLock lock(missing_mu_);
  return missing_at_timeout_;
}

std::vector<std::string> Coordinator::exchange_descriptions(const Ballot& mine, detail::Deadline deadline) {
  const std::string bytes = mine.status == Status::kFailed
                                ? encode_error(mine.error, mine.failed_replica, absl::StatusCode::kUnknown)
                                : mine.describe();
  std::vector<std::string> all;
  if (std::vector<int> missing = exchange_sized([&](std::span<const std::byte> part, std::span<std::byte> parts) {
        return transport().exchange(part, parts, deadline);
      }, bytes, num_workers(), all);
      !missing.empty()) {
    time_out(mine, missing);
  }
  return all;
}

int Coordinator::agree(const Ballot& mine) {
  stepper_.assume_held();
  int agreed = 0;
  try {
    agreed = agree_or_throw(mine);
  } catch (...) {
    if (!runs_.empty()) runs_.back() = true;
    throw;
  }
  if (mine.status == Status::kReturned && !runs_.empty()) runs_.back() = true;
  return agreed;
}

int Coordinator::agreed_ahead(std::span<const Header> headers, const Header& mine) {
  std::uint64_t agreed = mine.ahead_count;
  for (const Header& h : headers) agreed = std::min(agreed, h.ahead_count);
  for (std::uint64_t j = 0; j < agreed; ++j) {
    const Header::Entry& e = mine.ahead[j];
    for (const Header& h : headers) {
      if (h.ahead[j].signature != e.signature || h.ahead[j].kind != e.kind) return static_cast<int>(j);
    }
  }
  return static_cast<int>(agreed);
}

int Coordinator::agree_or_throw(const Ballot& mine) {
  group_.check_usable();
  const detail::Deadline deadline = detail::deadline_after(mine.timeout);
  Header header{static_cast<std::uint32_t>(mine.status), mine.kind,
                stop_raised_here() ? kStopRequested : std::uint16_t{0},
                mine.status == Status::kCall ? mine.sequence : 0,
                mine.status == Status::kCall ? mine.signature : 0};
  if (mine.status == Status::kCall) {
    header.ahead_count = std::min(mine.ahead.size(), kMaxAhead);
    for (std::size_t j = 0; j < header.ahead_count; ++j) {
      header.ahead[j] = Header::Entry{mine.ahead[j].signature, mine.ahead[j].kind};
    }
  }
  const int n = group_.num_workers();
  std::vector<Header> headers(static_cast<std::size_t>(n));
  if (std::vector<int> missing = transport().exchange(std::as_bytes(std::span(&header, 1)),
                                                      std::as_writable_bytes(std::span(headers)), deadline);
      !missing.empty()) {
    time_out(mine, missing);
  }
  // Every header came, but a worker may have given up before this one's header reached it.
  const auto what = [&] {
    return mine.status == Status::kCall ? mine.name() : std::string("the end of a run");
  };
  group_.check_nobody_gave_up(what);
  if (std::any_of(headers.begin(), headers.end(), [](const Header& h) { return (h.flags & kStopRequested) != 0; })) {
    stop_requested_.store(true, std::memory_order_release);
  }
  if (std::all_of(headers.begin(), headers.end(), [&](const Header& h) { return h.same_call(header); }) &&
      mine.status != Status::kFailed) {
    return agreed_ahead(headers, header);
  }
  throw_if_a_worker_left(headers, what);
  // Every worker sees the same headers, so every worker takes this path and builds the same error.
  const std::vector<std::string> described = exchange_descriptions(mine, deadline);
  for (int w = 0; w < n; ++w) {
    if (headers[static_cast<std::size_t>(w)].status != static_cast<std::uint32_t>(Status::kFailed)) continue;
    if (w == group_.worker_id()) std::rethrow_exception(mine.error);
    throw_failure_of(w, described[static_cast<std::size_t>(w)]);
  }
  const auto name = [this](const std::vector<int>& workers) { return group_.workers_text(workers); };
  if (std::exception_ptr error = mine.disagreement(described, name)) std::rethrow_exception(error);
  throw InvalidArgumentError(
      absl::StrCat(mine.name(), ": the workers' calls differ in a way their descriptions do not show"));
}

void Coordinator::throw_if_a_worker_left(std::span<const Header> headers, absl::FunctionRef<std::string()> what) {
  // A worker that left sends nothing more: no descriptions to exchange, and the collective cannot
  // complete without it.
  std::vector<int> left;
  for (std::size_t w = 0; w < headers.size(); ++w) {
    if (headers[w].status == static_cast<std::uint32_t>(Status::kLeft)) left.push_back(static_cast<int>(w));
  }
  if (left.empty()) return;
  group_.make_unusable(absl::StrCat(group_.workers_text(left), " destroyed its strategy"));
  throw UnavailableError(absl::StrCat(group_.workers_text(left), " destroyed its strategy while ", this_worker(),
                                      " waits in ", what(),
                                      "; every worker must make the same calls before destroying its strategy"));
}

void Coordinator::throw_failure_of(int worker, absl::string_view described) {
  const std::optional<WireError> error = decode_error(described);
  if (!error) throw InternalError(absl::StrCat("worker ", worker, " failed, and its report does not parse: ", described));
  // A failure of no single replica (a merge_fn's, a timeout) names the worker's replicas.
  const std::string who = error->replica >= 0 ? absl::StrCat("worker ", worker, " (replica ", error->replica, ")")
                                              : group_.workers_text({worker});
  if (error->code == absl::StatusCode::kUnknown) {
    throw AbortedError(
        absl::StrCat(who, " raised: ", error->message, "; the other workers were released from their collectives"));
  }
  throw_status(absl::Status(error->code, absl::StrCat(who, ": ", error->message)));
}

}  // namespace distribute::cluster
