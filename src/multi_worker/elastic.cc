// Elastic training: ElasticState's commits and synchronisation, and run_elastic's loop across the
// generations of an elastic MultiWorkerMirroredStrategy.
#include "distribute/elastic/elastic.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "checkpoint/require_cross_replica.h"
#include "cluster/coordinator.h"
#include "distribute/check.h"
#include "distribute/errors.h"
#include "distribute/strategy/context.h"

namespace distribute {
namespace {

// What each worker tells the others before the state is synchronised: how recent its kept state
// is (the job's commits so far, -1 for a newcomer that has none).
struct Recency {
  std::int64_t commits;
};

// The kept state's bytes: the commits and progress, then every entry's bytes in order.
struct Header {
  std::int64_t commits;
  std::int64_t step;
  std::int64_t epoch;
  std::int64_t input_position;
};

}  // namespace

ElasticState::ElasticState(MultiWorkerMirroredStrategy& strategy, Checkpoint checkpoint,
                           std::filesystem::path save_path)
    : strategy_(strategy), checkpoint_(std::move(checkpoint)), save_path_(std::move(save_path)) {
  DISTRIBUTE_CHECK(strategy_.elastic(), InvalidArgumentError, "ElasticState: ", strategy_.name(),
                   " is not elastic; set options.elastic.min_workers (and max_workers) when constructing it");
  for (const auto& [name, variable] : checkpoint_.variables()) {
    DISTRIBUTE_CHECK(detail::created_for(variable, strategy_), InvalidArgumentError, "ElasticState: variable '", name,
                     "' was not created under the scope of ", strategy_.name(),
                     "; give the state only that strategy's variables");
  }
}

void ElasticState::keep() {
  kept_ = checkpoint_.read_copies();
  committed_ = progress;
  kept_any_ = true;
}

void ElasticState::commit() {
  detail::require_cross_replica("ElasticState::commit", "commit at a step boundary, in cross-replica context");
  keep();
  ++commits_;
  bool waiting = false;
  try {
    waiting = strategy_.newcomer_waiting();
  } catch (const UnavailableError&) {
    // Every worker alike, the workers still together: the store is gone, and with it the changes.
    store_failed_ = strategy_.extended().coordinator()->usable();
    throw;
  }
  if (waiting) throw MembershipChangeInterrupt();
}

void ElasticState::synchronize() {
  StrategyScope scope = strategy_.scope();
  cluster::Coordinator& coordinator = *strategy_.extended().coordinator();
  cluster::WorkerGroup& group = coordinator.group();
  const std::chrono::duration<double> timeout = strategy_.extended().default_options().timeout;
  const Recency mine{kept_any_ ? commits_ : -1};
  std::vector<std::size_t> sizes;
  const std::vector<std::byte> all =
      group.all_gather(std::as_bytes(std::span(&mine, 1)), sizes, timeout, "run_elastic: the workers' commits");
  std::vector<Recency> recency(static_cast<std::size_t>(coordinator.num_workers()));
  std::memcpy(recency.data(), all.data(), std::min(all.size(), recency.size() * sizeof(Recency)));
  // The lowest worker of those that committed last.
  const auto source = static_cast<int>(
      std::max_element(recency.begin(), recency.end(),
                       [](const Recency& a, const Recency& b) { return a.commits < b.commits; }) -
      recency.begin());

  std::vector<std::byte> bytes;
  if (coordinator.worker_id() == source) {
    if (!kept_any_) keep();
    const Header header{commits_, committed_.step, committed_.epoch, committed_.input_position};
    bytes.resize(sizeof header);
    std::memcpy(bytes.data(), &header, sizeof header);
    for (const Tensor& value : kept_) {
      const auto* data = static_cast<const std::byte*>(value.raw_data());
      bytes.insert(bytes.end(), data, data + value.nbytes());
    }
  }
  std::uint64_t size = bytes.size();
  group.broadcast(&size, sizeof size, source, timeout, "run_elastic: the size of the state");
  const std::vector<Tensor> mine_now = kept_any_ ? kept_ : checkpoint_.read_copies();
  std::size_t expected = sizeof(Header);
  for (const Tensor& value : mine_now) expected += value.nbytes();
  bytes.resize(size);
  group.broadcast(bytes.data(), size, source, timeout, "run_elastic: the state");
  DISTRIBUTE_CHECK(size == expected, InvalidArgumentError, "run_elastic: worker ", source, "'s state has ", size,
                   " bytes and this worker's ", expected,
                   "; every worker must give its ElasticState the same variables and state, in the same order");
  Header header;
  std::memcpy(&header, bytes.data(), sizeof header);
  std::vector<Tensor> values;
  std::size_t at = sizeof header;
  for (const Tensor& like : mine_now) {
    Tensor value = Tensor::empty(like.dtype(), like.shape(), Device::cpu());
    std::memcpy(value.raw_data(), bytes.data() + at, value.nbytes());
    at += value.nbytes();
    values.push_back(std::move(value));
  }
  checkpoint_.assign(nullptr, values);
  kept_ = std::move(values);
  kept_any_ = true;
  commits_ = header.commits;
  committed_ = {header.step, header.epoch, header.input_position};
  progress = committed_;
}

std::string ElasticState::save_kept() {
  if (save_path_.empty()) return "; the ElasticState has no save_path, so nothing was saved";
  StrategyScope scope = strategy_.scope();
  checkpoint_.assign(nullptr, kept_);
  checkpoint_.save(save_path_);
  return absl::StrCat("; the state of that step was saved to ", save_path_.string());
}

void run_elastic(MultiWorkerMirroredStrategy& strategy, ElasticState& state, const std::function<void()>& train) {
  DISTRIBUTE_CHECK(strategy.elastic(), InvalidArgumentError, "run_elastic: ", strategy.name(),
                   " is not elastic; set options.elastic.min_workers when constructing it");
  DISTRIBUTE_CHECK(&state.strategy_ == &strategy, InvalidArgumentError,
                   "run_elastic: the ElasticState was made for another strategy");
  detail::require_cross_replica("run_elastic", "call it in cross-replica context, outside Strategy::run");
  // The job's first workers start from their own state, which the others take from worker 0; a
  // newcomer takes the state of those that were there.
  if (strategy.generation() == 0 && !state.kept_any_) state.keep();
  const int min_workers = strategy.min_workers();
  for (;;) {
    std::string reason;
    try {
      // Every worker of this generation takes the most recent commit; a worker lost meanwhile is
      // one more change, as it is during the loop.
      state.synchronize();
      const int workers = strategy.extended().num_workers();
      if (workers < min_workers) {
        throw UnavailableError(absl::StrCat("run_elastic: ", workers, " workers are left and "
                                            "options.elastic.min_workers is ", min_workers, "; the job ends at its "
                                            "commit ", state.commits_, " (step ", state.committed_.step, ")",
                                            state.save_kept()));
      }
      train();
      return;
    } catch (const MembershipChangeInterrupt&) {
      reason = "workers wait to join";
    } catch (const Error& error) {
      const cluster::Coordinator* coordinator = strategy.extended().coordinator();
      if (state.store_failed_) {
        throw UnavailableError(absl::StrCat(error.what(), "; the job ends at its commit ", state.commits_, " (step ",
                                            state.committed_.step, ")", state.save_kept()));
      }
      if (coordinator == nullptr || coordinator->usable()) throw;  // not a lost worker: the program's error
      reason = error.what();
    }
    strategy.change_membership(reason);
  }
}

}  // namespace distribute
