// CallAgreement: the header exchange before every cross-worker step, and the errors built from it.
#include "cluster/call_agreement.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/error_code.h"
#include "distribute/errors.h"

namespace distribute::cluster {
namespace {

// A failed worker's description: its error's code, message and replica.
std::string describe_failure(std::exception_ptr error, int failed_replica) {
  const absl::StatusCode code = detail::status_code_of(error, absl::StatusCode::kUnknown);
  return absl::StrCat(static_cast<int>(code), "\n", failed_replica, "\n", detail::describe_exception(error));
}

}  // namespace

CallAgreement::CallAgreement(std::shared_ptr<WorkerGroup> workers) : workers_(std::move(workers)) {}

CallAgreement::~CallAgreement() {
  if (!workers_->usable()) return;
  const Header last{static_cast<std::uint32_t>(Status::kLeft), 0, 0, 0, 0};
  try {
    transport().send_farewell(std::as_bytes(std::span(&last, 1)));
  } catch (...) {
    // Nobody can be told: the others' timeouts still end their wait.
  }
}

void CallAgreement::time_out(const Ballot& mine, const std::vector<int>& missing) {
  const std::string what = mine.status == Status::kCall    ? mine.name()
                           : mine.status == Status::kReturned ? "the end of the replica function"
                                                                          : "the report of a failed run";
  std::string message = absl::StrCat("timed out after ", mine.timeout.count(), " s: ",
                                     workers_->workers_text(missing), " did not arrive while ", this_worker(),
                                     " waits in ", what, "; a worker is stuck, slow or skipped the collective");
  workers_->make_unusable(message);
  transport().send_gave_up(what);
  throw DeadlineExceededError(message);
}

std::vector<std::string> CallAgreement::exchange_descriptions(const Ballot& mine, detail::Deadline deadline) {
  const std::string bytes =
      mine.status == Status::kFailed ? describe_failure(mine.error, mine.failed_replica) : mine.describe();
  const int n = workers_->num_workers();
  std::vector<std::size_t> sizes(static_cast<std::size_t>(n));
  const std::uint64_t size = bytes.size();
  std::vector<std::byte> all(static_cast<std::size_t>(n) * sizeof(size));
  if (std::vector<int> missing = transport().exchange(std::as_bytes(std::span(&size, 1)), all, deadline);
      !missing.empty()) {
    time_out(mine, missing);
  }
  for (int w = 0; w < n; ++w) std::memcpy(&sizes[static_cast<std::size_t>(w)], &all[static_cast<std::size_t>(w) * 8], 8);
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  std::vector<std::byte> gathered(std::max<std::size_t>(total, 1));
  transport().all_gather(bytes.data(), sizes, gathered.data(), deadline, "the exchange of the workers' calls");
  std::vector<std::string> out;
  std::size_t at = 0;
  for (std::size_t s : sizes) {
    out.emplace_back(reinterpret_cast<const char*>(gathered.data() + at), s);
    at += s;
  }
  return out;
}

void CallAgreement::agree(const Ballot& mine) {
  stepper_.claim();
  try {
    agree_or_throw(mine);
  } catch (...) {
    if (!runs_.empty()) runs_.back() = true;
    throw;
  }
  if (mine.status == Status::kReturned && !runs_.empty()) runs_.back() = true;
}

void CallAgreement::agree_or_throw(const Ballot& mine) {
  workers_->check_usable();
  const detail::Deadline deadline = detail::deadline_after(mine.timeout);
  const Header header{static_cast<std::uint32_t>(mine.status), mine.kind,
                      stop_raised_here() ? kStopRequested : std::uint16_t{0},
                      mine.status == Status::kCall ? mine.sequence : 0,
                      mine.status == Status::kCall ? mine.signature : 0};
  const int n = workers_->num_workers();
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
  workers_->check_nobody_gave_up(what);
  if (std::any_of(headers.begin(), headers.end(), [](const Header& h) { return (h.flags & kStopRequested) != 0; })) {
    stop_requested_.store(true, std::memory_order_release);
  }
  if (std::all_of(headers.begin(), headers.end(), [&](const Header& h) { return h.same_call(header); }) &&
      mine.status != Status::kFailed) {
    return;
  }
  throw_if_a_worker_left(headers, what);
  // Every worker sees the same headers, so every worker takes this path and builds the same error.
  const std::vector<std::string> described = exchange_descriptions(mine, deadline);
  for (int w = 0; w < n; ++w) {
    if (headers[static_cast<std::size_t>(w)].status != static_cast<std::uint32_t>(Status::kFailed)) continue;
    if (w == workers_->worker_id()) std::rethrow_exception(mine.error);
    throw_failure_of(w, described[static_cast<std::size_t>(w)]);
  }
  const auto name = [this](const std::vector<int>& workers) { return workers_->workers_text(workers); };
  if (std::exception_ptr error = mine.disagreement(described, name)) std::rethrow_exception(error);
  throw InvalidArgumentError(
      absl::StrCat(mine.name(), ": the workers' calls differ in a way their descriptions do not show"));
}

void CallAgreement::throw_if_a_worker_left(std::span<const Header> headers, absl::FunctionRef<std::string()> what) {
  // A worker that left sends nothing more: no descriptions to exchange, and the collective cannot
  // complete without it.
  std::vector<int> left;
  for (std::size_t w = 0; w < headers.size(); ++w) {
    if (headers[w].status == static_cast<std::uint32_t>(Status::kLeft)) left.push_back(static_cast<int>(w));
  }
  if (left.empty()) return;
  workers_->make_unusable(absl::StrCat(workers_->workers_text(left), " destroyed its strategy"));
  throw UnavailableError(absl::StrCat(workers_->workers_text(left), " destroyed its strategy while ", this_worker(),
                                      " waits in ", what(),
                                      "; every worker must make the same calls before destroying its strategy"));
}

void CallAgreement::throw_failure_of(int worker, absl::string_view described) {
  // "code\nreplica\nmessage", as describe_failure writes it.
  const std::size_t first = described.find('\n');
  const std::size_t second = first == absl::string_view::npos ? first : described.find('\n', first + 1);
  int code = 0;
  int replica = -1;
  if (second == absl::string_view::npos || !absl::SimpleAtoi(described.substr(0, first), &code) ||
      !absl::SimpleAtoi(described.substr(first + 1, second - first - 1), &replica)) {
    throw InternalError(absl::StrCat("worker ", worker, " failed, and its report does not parse: ", described));
  }
  const absl::string_view message = described.substr(second + 1);
  // A failure of no single replica (a merge_fn's, a timeout) names the worker's replicas.
  const std::string who =
      replica >= 0 ? absl::StrCat("worker ", worker, " (replica ", replica, ")") : workers_->workers_text({worker});
  if (static_cast<absl::StatusCode>(code) == absl::StatusCode::kUnknown) {
    throw AbortedError(absl::StrCat(who, " raised: ", message, "; the other workers were released from their collectives"));
  }
  throw_status(absl::Status(static_cast<absl::StatusCode>(code), absl::StrCat(who, ": ", message)));
}

}  // namespace distribute::cluster
