// WorkerSync: the header exchange before every cross-worker step, and the errors built from it.
#include "replica/worker_sync.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/collective/internal/collective_op.h"
#include "distribute/errors.h"
#include "device/kernels.h"
#include "replica/call_signature.h"

namespace distribute::detail {
namespace {

// A failed worker's description: its error's code, message and replica.
std::string describe_failure(const WorkerCall& mine) {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  try {
    std::rethrow_exception(mine.error);
  } catch (const Error& e) {
    code = e.code();
  } catch (...) {
  }
  return absl::StrCat(static_cast<int>(code), "\n", mine.failed_replica, "\n", describe_exception(mine.error));
}

}  // namespace

WorkerSync::WorkerSync(std::unique_ptr<WorkerTransport> engine, int num_local_replicas)
    : engine_(std::move(engine)), num_local_(num_local_replicas) {}

WorkerSync::~WorkerSync() {
  if (broken_.load(std::memory_order_acquire)) return;
  const WorkerSync::Header last{static_cast<std::uint32_t>(WorkerCall::Status::kLeft), 0, 0, 0};
  try {
    engine_->send_farewell(std::as_bytes(std::span(&last, 1)));
  } catch (...) {
    // Nobody can be told: the others' timeouts still end their wait.
  }
}

std::string WorkerSync::workers_text(const std::vector<int>& workers) const {
  std::vector<int> replicas;
  for (int w : workers) {
    for (int l = 0; l < num_local_; ++l) replicas.push_back(w * num_local_ + l);
  }
  return absl::StrCat(workers.size() == 1 ? "worker " : "workers ", absl::StrJoin(workers, ", "), " (",
                      replicas_text(replicas), ")");
}

void WorkerSync::check_usable() const {
  if (broken_.load(std::memory_order_acquire)) {
    throw UnavailableError(absl::StrCat("the workers' collectives are unusable after an earlier failure (",
                                        broken_reason_, "); create a new strategy in a new job"));
  }
}

void WorkerSync::time_out(const WorkerCall& mine, const std::vector<int>& missing) {
  const std::string what = mine.status == WorkerCall::Status::kCall    ? call_name(*mine.call)
                           : mine.status == WorkerCall::Status::kReturned ? "the end of the replica function"
                                                                          : "the report of a failed run";
  std::string message = absl::StrCat("timed out after ", mine.call->op.options.timeout.count(), " s: ",
                                     workers_text(missing), " did not arrive while ", workers_text({worker_id()}),
                                     " waits in ", what, "; a worker is stuck, slow or skipped the collective");
  break_with(message);
  engine_->send_gave_up(what);
  throw DeadlineExceededError(message);
}

void WorkerSync::break_with(std::string reason) {
  if (broken_.load(std::memory_order_acquire)) return;
  broken_reason_ = std::move(reason);
  broken_.store(true, std::memory_order_release);
}

void WorkerSync::abandon_data_phase(const Error& error, const StepName& what) {
  // The other workers gave up before this one arrived: say who, as the agreement would have.
  check_nobody_gave_up([&] { return what.str(); });
  // A data phase left half done cannot be taken back.
  break_with(error.what());
  throw;
}

void WorkerSync::check_nobody_gave_up(absl::FunctionRef<std::string()> what) {
  const std::vector<std::pair<int, std::string>> notes = engine_->take_gave_up();
  if (notes.empty()) return;
  std::vector<int> workers;
  std::vector<std::string> steps;
  for (const auto& [worker, step] : notes) {
    workers.push_back(worker);
    if (std::find(steps.begin(), steps.end(), step) == steps.end()) steps.push_back(step);
  }
  std::sort(workers.begin(), workers.end());
  const std::string message = absl::StrCat(
      workers_text(workers), " gave up waiting in ", absl::StrJoin(steps, ", "), " when ",
      workers.size() == 1 ? "its" : "their", " timeout passed, before ", workers_text({worker_id()}), " arrived in ",
      what(), "; the collective was abandoned (this worker is late: raise CommunicationOptions::timeout if it is slow)");
  break_with(message);
  throw DeadlineExceededError(message);
}

std::vector<std::string> WorkerSync::exchange_descriptions(const WorkerCall& mine, Deadline deadline) {
  const std::string bytes =
      mine.status == WorkerCall::Status::kFailed ? describe_failure(mine) : render_signature(*mine.call).serialize();
  const int n = num_workers();
  std::vector<std::size_t> sizes(static_cast<std::size_t>(n));
  const std::uint64_t size = bytes.size();
  std::vector<std::byte> all(static_cast<std::size_t>(n) * sizeof(size));
  if (std::vector<int> missing = engine_->exchange(std::as_bytes(std::span(&size, 1)), all, deadline);
      !missing.empty()) {
    time_out(mine, missing);
  }
  for (int w = 0; w < n; ++w) std::memcpy(&sizes[static_cast<std::size_t>(w)], &all[static_cast<std::size_t>(w) * 8], 8);
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  std::vector<std::byte> gathered(std::max<std::size_t>(total, 1));
  engine_->all_gather(bytes.data(), sizes, gathered.data(), deadline, "the exchange of the workers' calls");
  std::vector<std::string> out;
  std::size_t at = 0;
  for (std::size_t s : sizes) {
    out.emplace_back(reinterpret_cast<const char*>(gathered.data() + at), s);
    at += s;
  }
  return out;
}

void WorkerSync::agree(const WorkerCall& mine) {
  try {
    agree_or_throw(mine);
  } catch (...) {
    if (!runs_.empty()) runs_.back() = true;
    throw;
  }
  if (mine.status == WorkerCall::Status::kReturned && !runs_.empty()) runs_.back() = true;
}

void WorkerSync::agree_or_throw(const WorkerCall& mine) {
  check_usable();
  const collective::CollectiveOp& op = mine.call->op;
  const Deadline deadline = deadline_after(op.options.timeout);
  const Header header{static_cast<std::uint32_t>(mine.status), static_cast<std::uint32_t>(op.kind),
                      mine.status == WorkerCall::Status::kCall ? op.sequence : 0,
                      mine.status == WorkerCall::Status::kCall ? mine.call->signature : 0};
  const int n = num_workers();
  std::vector<Header> headers(static_cast<std::size_t>(n));
  if (std::vector<int> missing = engine_->exchange(std::as_bytes(std::span(&header, 1)),
                                                   std::as_writable_bytes(std::span(headers)), deadline);
      !missing.empty()) {
    time_out(mine, missing);
  }
  // Every header came, but a worker may have given up before this one's header reached it.
  const auto what = [&] {
    return mine.status == WorkerCall::Status::kCall ? call_name(*mine.call) : std::string("the end of a run");
  };
  check_nobody_gave_up(what);
  if (std::all_of(headers.begin(), headers.end(), [&](const Header& h) { return h == header; }) &&
      mine.status != WorkerCall::Status::kFailed) {
    return;
  }
  throw_if_a_worker_left(headers, what);
  // Every worker sees the same headers, so every worker takes this path and builds the same error.
  const std::vector<std::string> described = exchange_descriptions(mine, deadline);
  for (int w = 0; w < n; ++w) {
    if (headers[static_cast<std::size_t>(w)].status != static_cast<std::uint32_t>(WorkerCall::Status::kFailed)) continue;
    if (w == worker_id()) std::rethrow_exception(mine.error);
    throw_failure_of(w, described[static_cast<std::size_t>(w)]);
  }
  std::vector<RenderedSignature> calls;
  calls.reserve(described.size());
  for (const std::string& d : described) calls.push_back(RenderedSignature::deserialize(d));
  const auto name = [this](const std::vector<int>& workers) { return workers_text(workers); };
  if (std::exception_ptr error = find_disagreement(
          calls, Parties{name, "worker", "; every worker's replicas must pass the same kind of value"})) {
    std::rethrow_exception(error);
  }
  throw InvalidArgumentError(absl::StrCat(call_name(*mine.call),
                                          ": the workers' calls differ in a way their descriptions do not show"));
}

void WorkerSync::throw_if_a_worker_left(std::span<const Header> headers, absl::FunctionRef<std::string()> what) {
  // A worker that left sends nothing more: no descriptions to exchange, and the collective cannot
  // complete without it.
  std::vector<int> left;
  for (std::size_t w = 0; w < headers.size(); ++w) {
    if (headers[w].status == static_cast<std::uint32_t>(WorkerCall::Status::kLeft)) left.push_back(static_cast<int>(w));
  }
  if (left.empty()) return;
  break_with(absl::StrCat(workers_text(left), " destroyed its strategy"));
  throw UnavailableError(absl::StrCat(workers_text(left), " destroyed its strategy while ", workers_text({worker_id()}),
                                      " waits in ", what(),
                                      "; every worker must make the same calls before destroying its strategy"));
}

void WorkerSync::throw_failure_of(int worker, absl::string_view described) {
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
  const std::string who =
      replica >= 0 ? absl::StrCat("worker ", worker, " (replica ", replica, ")") : absl::StrCat("worker ", worker);
  if (static_cast<absl::StatusCode>(code) == absl::StatusCode::kUnknown) {
    throw AbortedError(absl::StrCat(who, " raised: ", message, "; the other workers were released from their collectives"));
  }
  throw_status(absl::Status(static_cast<absl::StatusCode>(code), absl::StrCat(who, ": ", message)));
}

void WorkerSync::all_reduce(DType dtype, void* data, std::int64_t count, std::chrono::duration<double> timeout,
                            const StepName& what) {
  check_usable();
  try {
    engine_->all_reduce(dtype, data, count, deadline_after(timeout), what);
  } catch (const Error& e) {
    abandon_data_phase(e, what);
  }
}

void WorkerSync::broadcast(void* data, std::size_t bytes, int root, std::chrono::duration<double> timeout,
                           const StepName& what) {
  check_usable();
  try {
    engine_->broadcast(data, bytes, root, deadline_after(timeout), what);
  } catch (const Error& e) {
    abandon_data_phase(e, what);
  }
}

std::vector<std::byte> WorkerSync::all_gather(std::span<const std::byte> mine, std::vector<std::size_t>& sizes,
                                              std::chrono::duration<double> timeout, const StepName& what) {
  check_usable();
  const Deadline deadline = deadline_after(timeout);
  const std::uint64_t size = mine.size();
  const auto n = static_cast<std::size_t>(num_workers());
  std::vector<std::uint64_t> all(n);
  std::vector<std::byte> raw(n * sizeof(size));
  if (std::vector<int> missing = engine_->exchange(std::as_bytes(std::span(&size, 1)), raw, deadline); !missing.empty()) {
    break_with(absl::StrCat("the data phase of ", what.str(), " stalled"));
    throw DeadlineExceededError(absl::StrCat("timed out after ", timeout.count(), " s in ", what.str(), ": ",
                                             workers_text(missing), " did not send its sizes"));
  }
  std::memcpy(all.data(), raw.data(), raw.size());
  sizes.assign(all.begin(), all.end());
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  std::vector<std::byte> out(total);
  try {
    engine_->all_gather(mine.data(), sizes, out.data(), deadline, what);
  } catch (const Error& e) {
    abandon_data_phase(e, what);
  }
  return out;
}

void WorkerSync::all_gather_along_axis(std::int64_t dim, std::int64_t outer, std::size_t inner_bytes,
                                       absl::FunctionRef<void(std::byte*)> write_part,
                                       absl::FunctionRef<std::byte*(std::int64_t total)> output,
                                       std::chrono::duration<double> timeout, const StepName& what) {
  // Each part starts with its size along the axis: with an empty outer or inner extent the byte
  // counts alone would not tell it.
  std::vector<std::byte> part(sizeof(dim) + static_cast<std::size_t>(outer * dim) * inner_bytes);
  std::memcpy(part.data(), &dim, sizeof(dim));
  write_part(part.data() + sizeof(dim));
  std::vector<std::size_t> sizes;
  const std::vector<std::byte> all = all_gather(part, sizes, timeout, what);
  std::vector<const void*> parts;
  std::vector<std::int64_t> dims;
  std::int64_t total = 0;
  std::size_t at = 0;
  for (std::size_t size : sizes) {
    std::int64_t d = 0;
    std::memcpy(&d, all.data() + at, sizeof(d));
    parts.push_back(all.data() + at + sizeof(d));
    dims.push_back(d);
    total += d;
    at += size;
  }
  concat_buffers(parts, dims, outer, inner_bytes, output(total));
}

std::int64_t WorkerSync::sum(std::int64_t value, std::chrono::duration<double> timeout, const StepName& what) {
  all_reduce(DType::kInt64, &value, 1, timeout, what);
  return value;
}

}  // namespace distribute::detail
