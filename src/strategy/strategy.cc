// Strategy: scopes, and the cross-replica methods that need no template.
#include "distribute/strategy/strategy.h"

#include <exception>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/timeline.h"
#include "distribute/strategy/default_strategy.h"

namespace distribute {

namespace detail {

StrategyIdentity::StrategyIdentity(Strategy& strategy)
    : id_([] {
        static std::atomic<std::uint64_t> strategies{0};
        return strategies.fetch_add(1, std::memory_order_relaxed) + 1;
      }()),
      name_(strategy.name()),
      num_replicas_in_sync_(strategy.num_replicas_in_sync()),
      worker_id_(strategy.extended().worker_id()),
      strategy_(&strategy) {}

void StrategyIdentity::refresh(Strategy& strategy) {
  name_ = strategy.name();
  num_replicas_in_sync_ = strategy.num_replicas_in_sync();
  worker_id_ = strategy.extended().worker_id();
}

Strategy& StrategyIdentity::get(std::string_view user) const {
  Strategy* strategy = strategy_.load(std::memory_order_acquire);
  DISTRIBUTE_CHECK(strategy != nullptr, FailedPreconditionError, std::string(user), " was made for ", name_,
                   ", which has been destroyed; use it only while its strategy exists (its last values stay "
                   "readable through component(i))");
  return *strategy;
}

}  // namespace detail

Strategy::~Strategy() {
  if (identity_) identity_->strategy_.store(nullptr, std::memory_order_release);
  detail::forget_strategy(this);
}

void Strategy::set_extended(std::unique_ptr<StrategyExtended> extended) {
  detail::timeline::start_from_environment_once();
  extended_ = std::move(extended);
  identity_.reset(new detail::StrategyIdentity(*this));
}

void Strategy::replace_extended(std::unique_ptr<StrategyExtended> extended) {
  extended_ = std::move(extended);
  identity_->refresh(*this);
}

StrategyScope Strategy::scope() { return StrategyScope(*this); }

StrategyScope::StrategyScope(Strategy& strategy) : strategy_(&strategy) {
  const detail::ThreadMode& mode = detail::current_mode();
  if (mode.strategy == &strategy || !has_strategy()) {
    detail::require_cross_replica_or_default(strategy, "Strategy::scope", "a replica cannot enter a scope");
    thread_ = std::make_unique<const std::thread::id>(std::this_thread::get_id());
    detail::push_mode(detail::ThreadMode{&strategy, nullptr, true, mode.strategy == &strategy ? mode.run_depth : 0},
                      thread_.get());
    return;
  }
  throw FailedPreconditionError(absl::StrCat(
      "Strategy::scope: Mixing different distribute::Strategy objects: ", mode.strategy->name(), " is not ",
      strategy.name(), "; leave the scope of ", mode.strategy->name(), " before entering another strategy's"));
}

StrategyScope::StrategyScope(StrategyScope&& other) noexcept
    : strategy_(std::exchange(other.strategy_, nullptr)), thread_(std::move(other.thread_)) {}

StrategyScope::~StrategyScope() noexcept(false) {
  if (thread_ == nullptr) return;  // moved from
  if (*thread_ == std::this_thread::get_id()) {
    detail::pop_mode(thread_.get());
    return;
  }
  // Throwing while another exception propagates would end the program.
  if (std::uncaught_exceptions() > 0) return;
  // The strategy may be gone already (a scope may outlive it), so the message does not name it.
  throw FailedPreconditionError(
      "StrategyScope: destroyed on a thread that did not enter it; only the entering thread can leave its scope, "
      "so that thread stays in the strategy's cross-replica context. Destroy a scope on the thread that called "
      "Strategy::scope()");
}

Tensor Strategy::gather(const DistributedValues<Tensor>& value, int axis) {
  detail::require_cross_replica_or_default(
      *this, "Strategy::gather", "inside a replica use get_replica_context()->all_gather() instead");
  check_replica_count(value.num_replicas(), "Strategy::gather");
  return extended_->concat_components(value.values(), axis, Device::cpu(), {}, "Strategy::gather");
}

void Strategy::check_replica_count(int num_values, const char* method) const {
  DISTRIBUTE_CHECK(num_values == extended_->num_local_replicas(), InvalidArgumentError, method,
                   ": the value holds values for ", num_values, " replicas but ", name(), " has ",
                   extended_->num_local_replicas(), extended_->in_multi_worker_mode() ? " on this worker" : "",
                   "; pass values created by this strategy");
}

Tensor Strategy::reduce_non_distributed(ReduceOp op, const Tensor& value, std::optional<int> axis) {
  DISTRIBUTE_CHECK(op == ReduceOp::kMean || num_replicas_in_sync() == 1, InvalidArgumentError,
                   "Strategy::reduce: a value that is not distributed cannot be reduced with SUM over the ",
                   num_replicas_in_sync(), " replicas of ", name(),
                   " (it would count it once per replica); pass a PerReplica or use MEAN");
  const Tensor components[] = {value};
  return extended_->reduce_components(op, components, axis, Device::cpu(), {}, "Strategy::reduce");
}

}  // namespace distribute
