// The context queries of the public API, and the default strategy they fall back to.
#include "distribute/strategy/context.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "distribute/errors.h"
#include "distribute/replica/internal/context_stack.h"
#include "distribute/replica/replica_context.h"
#include "distribute/strategy/default_strategy.h"
#include "replica/strategy_replica_context.h"

namespace distribute {
namespace detail {
namespace {

// Never destroyed: replica threads may still consult it during static destruction.
ReplicaContext& default_replica_context() {
  static ReplicaContext* context = StrategyReplicaContext::make_default(default_strategy());
  return *context;
}

}  // namespace

Strategy& default_strategy() {
  static DefaultStrategy* strategy = new DefaultStrategy();
  return *strategy;
}

void require_cross_replica_or_default(const Strategy& strategy, const char* method, const char* hint) {
  const ThreadMode& mode = current_mode();
  if (mode.strategy == nullptr) return;  // no scope: the default context
  if (mode.cross_replica && mode.strategy == &strategy) return;
  if (mode.strategy != &strategy && (mode.cross_replica || mode.strategy != &default_strategy())) {
    throw FailedPreconditionError(absl::StrCat(
        method, ": Mixing different distribute::Strategy objects: ", mode.strategy->name(), " is not ",
        strategy.name(), "; leave the other strategy's scope (or its run) first"));
  }
  throw FailedPreconditionError(absl::StrCat(
      method, " requires being in cross-replica context, use get_replica_context()->merge_call()",
      hint != nullptr ? absl::StrCat(" (", hint, ")") : std::string()));
}

}  // namespace detail

ReplicaContext* get_replica_context() {
  const detail::ThreadMode& mode = detail::current_mode();
  if (mode.strategy == nullptr) return &detail::default_replica_context();
  return mode.replica_context;
}

Strategy* get_cross_replica_context() {
  const detail::ThreadMode& mode = detail::current_mode();
  return mode.cross_replica ? mode.strategy : nullptr;
}

bool in_cross_replica_context() { return detail::current_mode().cross_replica; }

bool has_strategy() {
  const Strategy* strategy = detail::current_mode().strategy;
  return strategy != nullptr && strategy != &detail::default_strategy();
}

Strategy& get_strategy() {
  Strategy* strategy = detail::current_mode().strategy;
  return strategy != nullptr ? *strategy : detail::default_strategy();
}

}  // namespace distribute
