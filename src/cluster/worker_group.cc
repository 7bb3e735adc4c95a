// WorkerGroup: the data steps across the workers, and the state a failed one leaves.
#include "cluster/worker_group.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/compression.h"
#include "device/kernels.h"
#include "distribute/collective/internal/collective_op.h"
#include "distribute/errors.h"

namespace distribute::cluster {

WorkerGroup::WorkerGroup(std::unique_ptr<WorkerTransport> transport, int num_local_replicas)
    : transport_(std::move(transport)), num_local_(num_local_replicas) {}

std::string workers_on_hosts(const std::vector<int>& workers, const std::vector<std::string>& hosts) {
  std::string text = absl::StrCat(workers.size() == 1 ? "worker " : "workers ", absl::StrJoin(workers, ", "));
  if (std::adjacent_find(hosts.begin(), hosts.end(), std::not_equal_to<>()) == hosts.end()) return text;
  std::vector<std::string> named;
  for (int w : workers) {
    const std::string& host = hosts[static_cast<std::size_t>(w)];
    if (std::find(named.begin(), named.end(), host) == named.end()) named.push_back(host);
  }
  return absl::StrCat(text, " on ", absl::StrJoin(named, ", "));
}

std::string WorkerGroup::workers_text(const std::vector<int>& workers) const {
  std::vector<int> replicas;
  for (int w : workers) {
    for (int l = 0; l < num_local_; ++l) replicas.push_back(w * num_local_ + l);
  }
  return absl::StrCat(workers_on_hosts(workers, transport_->hosts()), " (", collective::replicas_text(replicas), ")");
}

void WorkerGroup::check_usable() const {
  if (usable()) return;
  detail::MutexLock lock(broken_mu_);
  throw UnavailableError(absl::StrCat("the workers' collectives are unusable after an earlier failure (",
                                      broken_reason_, "); create a new strategy on every worker"));
}

void WorkerGroup::make_unusable(std::string reason) {
  detail::MutexLock lock(broken_mu_);
  if (!usable()) return;
  broken_reason_ = std::move(reason);
  broken_.store(true, std::memory_order_release);
}

void WorkerGroup::check_nobody_gave_up(absl::FunctionRef<std::string()> what) {
  const std::vector<std::pair<int, std::string>> notes = transport_->take_gave_up();
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
  make_unusable(message);
  throw DeadlineExceededError(message);
}

void WorkerGroup::abandon_data_step(const Error& error, const StepName& what) {
  // The other workers gave up before this one arrived: say who, as the agreement would have.
  check_nobody_gave_up([&] { return what.str(); });
  make_unusable(error.what());
  throw;
}

void WorkerGroup::take_data_step(const StepName& what, absl::FunctionRef<void()> step) {
  check_usable();
  try {
    step();
  } catch (const Error& e) {
    abandon_data_step(e, what);
  }
}

void WorkerGroup::all_reduce(DType dtype, void* data, std::int64_t count, std::chrono::duration<double> timeout,
                             const StepName& what, Compression compression) {
  int overflowed = -1;
  take_data_step(what, [&] {
    overflowed = transport_->all_reduce(dtype, data, count, compression, detail::deadline_after(timeout), what);
  });
  if (overflowed < 0) return;
  throw collective::overflow_error(what.str(), compression, workers_text({overflowed}), "workers'");
}

void WorkerGroup::broadcast(void* data, std::size_t bytes, int root, std::chrono::duration<double> timeout,
                            const StepName& what) {
  take_data_step(what, [&] { transport_->broadcast(data, bytes, root, detail::deadline_after(timeout), what); });
}

std::vector<std::byte> WorkerGroup::all_gather(std::span<const std::byte> mine, std::vector<std::size_t>& sizes,
                                               std::chrono::duration<double> timeout, const StepName& what) {
  check_usable();
  const detail::Deadline deadline = detail::deadline_after(timeout);
  const std::uint64_t size = mine.size();
  const auto n = static_cast<std::size_t>(num_workers());
  std::vector<std::uint64_t> all(n);
  std::vector<std::byte> raw(n * sizeof(size));
  if (std::vector<int> missing = transport_->exchange(std::as_bytes(std::span(&size, 1)), raw, deadline);
      !missing.empty()) {
    make_unusable(absl::StrCat("the data phase of ", what.str(), " stalled"));
    throw DeadlineExceededError(absl::StrCat("timed out after ", timeout.count(), " s in ", what.str(), ": ",
                                             workers_text(missing), " did not send its sizes"));
  }
  std::memcpy(all.data(), raw.data(), raw.size());
  sizes.assign(all.begin(), all.end());
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  std::vector<std::byte> out(total);
  take_data_step(what, [&] { transport_->all_gather(mine.data(), sizes, out.data(), deadline, what); });
  return out;
}

void WorkerGroup::all_gather_along_axis(std::int64_t dim, std::int64_t outer, std::size_t inner_bytes,
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
  detail::concat_buffers(parts, dims, outer, inner_bytes, output(total));
}

std::int64_t WorkerGroup::sum(std::int64_t value, std::chrono::duration<double> timeout, const StepName& what) {
  all_reduce(DType::kInt64, &value, 1, timeout, what);
  return value;
}

}  // namespace distribute::cluster
