// The workers' agreement on each step of their distributed iterators, and its errors.
#include "distribute/input/internal/worker_agreement.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/wait.h"
#include "cluster/coordinator.h"
#include "distribute/errors.h"

namespace distribute::input::internal {
namespace {

// A StepReport as it is sent: fixed widths, no padding, every byte set.
struct WireStepReport {
  std::int64_t step = 0;
  std::uint64_t structure = 0;
  std::uint8_t status = 0;
  std::uint8_t full = 0;
  std::uint8_t drops = 0;
  std::uint8_t empties = 0;
  std::uint32_t unused = 0;
};
static_assert(sizeof(WireStepReport) == 24, "WireStepReport is sent as bytes: it must have no padding");

WireStepReport to_wire(const StepReport& r) {
  return {r.step, r.structure, static_cast<std::uint8_t>(r.status), static_cast<std::uint8_t>(r.full),
          static_cast<std::uint8_t>(r.drops), static_cast<std::uint8_t>(r.empties)};
}

StepReport from_wire(const WireStepReport& w) {
  return {w.step, w.structure, static_cast<StepReport::Status>(w.status), w.full != 0, w.drops != 0,
          static_cast<StepReport::Empties>(w.empties)};
}

constexpr const char* kWhere = "DistributedIterator::get_next";

// A leaf description as int64s: dtype, rank, then the dimensions after the first.
void append_leaf(std::vector<std::int64_t>& out, const LeafSpec& leaf) {
  const std::vector<std::int64_t> dims = leaf.shape.dims();
  out.push_back(static_cast<std::int64_t>(leaf.dtype));
  out.push_back(static_cast<std::int64_t>(dims.size()));
  for (std::size_t d = 1; d < dims.size(); ++d) out.push_back(dims[d]);
}

std::vector<LeafSpec> read_leaves(std::span<const std::int64_t> words) {
  std::vector<LeafSpec> leaves;
  std::size_t at = 0;
  const std::size_t count = static_cast<std::size_t>(words[at++]);
  for (std::size_t i = 0; i < count; ++i) {
    const auto dtype = static_cast<DType>(words[at++]);
    const auto rank = static_cast<std::size_t>(words[at++]);
    std::vector<std::int64_t> dims{0};
    for (std::size_t d = 1; d < rank; ++d) dims.push_back(words[at++]);
    leaves.push_back({dtype, Shape(std::move(dims))});
  }
  return leaves;
}

}  // namespace

WorkerAgreement::WorkerAgreement(std::shared_ptr<cluster::Coordinator> coordinator,
                                 std::chrono::duration<double> timeout)
    : coordinator_(std::move(coordinator)), timeout_(timeout) {}

void WorkerAgreement::check_arrived(const std::vector<int>& missing, std::int64_t step) {
  if (missing.empty()) return;
  std::string message = absl::StrCat(
      kWhere, ": timed out after ", timeout_.count(), " s: ", coordinator_->workers_text(missing),
      " did not arrive while ", coordinator_->workers_text({coordinator_->worker_id()}), " waits to agree on step ",
      step,
      " of a distributed dataset; a worker is stuck or slow, or stopped iterating (every worker must iterate its "
      "distributed datasets alike, to the end)");
  // A late worker's report would be taken for a later step's.
  if (!broken_.load(std::memory_order_acquire)) {
    broken_reason_ = message;
    broken_.store(true, std::memory_order_release);
  }
  throw DeadlineExceededError(std::move(message));
}

StepDecision WorkerAgreement::agree(const StepReport& mine, absl::FunctionRef<std::vector<LeafSpec>()> describe) {
  if (broken_.load(std::memory_order_acquire)) {
    throw UnavailableError(absl::StrCat(kWhere, ": the workers' distributed input is unusable after an earlier failure (",
                                        broken_reason_, "); create a new strategy on every worker"));
  }
  const int n = coordinator_->num_workers();
  const WireStepReport sent = to_wire(mine);
  std::vector<WireStepReport> received(static_cast<std::size_t>(n));
  check_arrived(coordinator_->exchange_reports(std::as_bytes(std::span(&sent, 1)),
                                               std::as_writable_bytes(std::span(received)),
                                               detail::deadline_after(timeout_)),
                mine.step);
  std::vector<StepReport> reports;
  reports.reserve(received.size());
  for (const WireStepReport& w : received) reports.push_back(from_wire(w));
  const auto workers_where = [&](auto&& pred) {
    std::vector<int> out;
    for (int w = 0; w < n; ++w) {
      if (pred(reports[static_cast<std::size_t>(w)])) out.push_back(w);
    }
    return out;
  };
  const std::vector<int> failed = workers_where([](const StepReport& r) { return r.status == StepReport::Status::kFailed; });
  if (mine.status == StepReport::Status::kFailed) return {};
  if (!failed.empty()) {
    throw AbortedError(absl::StrCat(kWhere, ": the input pipeline of ", coordinator_->workers_text(failed),
                                    " raised an error while making step ", mine.step,
                                    " (see that worker's error); every worker's iterator stops there"));
  }
  const std::vector<int> other_step = workers_where([&](const StepReport& r) { return r.step != reports[0].step; });
  if (!other_step.empty()) {
    const int w = other_step.front();
    throw InvalidArgumentError(absl::StrCat(
        kWhere, ": ", coordinator_->workers_text({w}), " asks for step ", reports[static_cast<std::size_t>(w)].step,
        " of a distributed dataset where ", coordinator_->workers_text({0}), " asks for step ", reports[0].step,
        "; every worker must iterate its distributed datasets alike (the same get_next calls, in the same order)"));
  }
  const bool drops = std::any_of(reports.begin(), reports.end(), [](const StepReport& r) { return r.drops; });
  const auto has_data = [](const StepReport& r) { return r.status == StepReport::Status::kData; };
  const bool run = drops ? std::all_of(reports.begin(), reports.end(), [&](const StepReport& r) { return has_data(r) && r.full; })
                         : std::any_of(reports.begin(), reports.end(), has_data);
  if (!run) return {};
  // Every worker without data gives its replicas empty batches, modelled on an element it has
  // seen, or else on the first worker's whose elements have its structure.
  const bool scalars = std::any_of(reports.begin(), reports.end(),
                                   [](const StepReport& r) { return r.empties == StepReport::Empties::kScalar; });
  std::vector<int> sources(static_cast<std::size_t>(n), -1);
  std::vector<int> scalar;
  std::vector<int> unknown;
  bool any_needy = false;
  for (int w = 0; w < n; ++w) {
    const StepReport& r = reports[static_cast<std::size_t>(w)];
    if (has_data(r) || r.empties == StepReport::Empties::kCan) continue;
    for (int v = 0; v < n && sources[static_cast<std::size_t>(w)] < 0 && r.empties == StepReport::Empties::kNone; ++v) {
      const StepReport& model = reports[static_cast<std::size_t>(v)];
      if (model.empties == StepReport::Empties::kCan && model.structure == r.structure) {
        sources[static_cast<std::size_t>(w)] = v;
      }
    }
    if (sources[static_cast<std::size_t>(w)] < 0) (scalars ? scalar : unknown).push_back(w);
    any_needy = true;
  }
  if (!scalar.empty()) {
    throw InvalidArgumentError(absl::StrCat(
        kWhere, ": ", coordinator_->workers_text(scalar), " has no data for step ", mine.step,
        " while other workers have, and the elements have a rank-0 leaf (a scalar), so no empty batch can stand in "
        "for them; batch the dataset (with drop_remainder to end every worker's loop at the first step that not "
        "every worker can fill)"));
  }
  if (!unknown.empty()) {
    throw InvalidArgumentError(absl::StrCat(
        kWhere, ": ", coordinator_->workers_text(unknown), " has no data for step ", mine.step,
        " while other workers have, and its input pipeline has made no element in this pass to model its empty "
        "batches on; the other workers' elements are of another structure than a default-constructed element (a "
        "list or dict, whose size and keys only an element shows): give every worker at least one element per "
        "pass, or use elements of a fixed structure (a Tensor, pair, tuple, array or struct)"));
  }
  StepDecision decision;
  decision.run = true;
  if (any_needy) decision.leaves = exchange_leaves(sources, describe, mine.step);
  return decision;
}

std::vector<LeafSpec> WorkerAgreement::exchange_leaves(const std::vector<int>& sources,
                                                       absl::FunctionRef<std::vector<LeafSpec>()> describe,
                                                       std::int64_t step) {
  const int me = coordinator_->worker_id();
  std::vector<std::int64_t> words;
  if (std::find(sources.begin(), sources.end(), me) != sources.end()) {
    const std::vector<LeafSpec> leaves = describe();
    words.push_back(static_cast<std::int64_t>(leaves.size()));
    for (const LeafSpec& leaf : leaves) append_leaf(words, leaf);
  }
  std::vector<std::string> all;
  check_arrived(coordinator_->exchange_report_bytes(
                    std::string(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(std::int64_t)), all,
                    detail::deadline_after(timeout_)),
                step);
  const int source = sources[static_cast<std::size_t>(me)];
  if (source < 0) return {};
  const std::string& description = all[static_cast<std::size_t>(source)];
  std::vector<std::int64_t> theirs(description.size() / sizeof(std::int64_t));
  std::memcpy(theirs.data(), description.data(), theirs.size() * sizeof(std::int64_t));
  return read_leaves(theirs);
}

}  // namespace distribute::input::internal
