// The per-thread context stack: the single thread_local of the library.
#include "distribute/replica/context_stack.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distribute/errors.h"
#include "distribute/replica/replica_context.h"
#include "distribute/strategy/default_strategy.h"

namespace distribute {
namespace detail {
namespace {

struct Entry {
  ThreadMode mode;
  const void* owner;
};

thread_local std::vector<Entry> t_stack;

ReplicaContext& default_replica_context() {
  static ReplicaContext* context = new ReplicaContext(default_strategy(), 0, 1, nullptr, Device::cpu(), 0);
  return *context;
}

const ThreadMode& default_mode() {
  static const ThreadMode mode{&default_strategy(), &default_replica_context(), false, 0};
  return mode;
}

}  // namespace

Strategy& default_strategy() {
  // Never destroyed: replica threads may still consult it during static destruction.
  static DefaultStrategy* strategy = new DefaultStrategy();
  return *strategy;
}

const ThreadMode& current_mode() { return t_stack.empty() ? default_mode() : t_stack.back().mode; }

ScopedMode::ScopedMode(const ThreadMode& mode) { push_mode(mode, this); }
ScopedMode::~ScopedMode() { pop_mode(this); }

void push_mode(const ThreadMode& mode, const void* owner) { t_stack.push_back({mode, owner}); }

void pop_mode(const void* owner) noexcept {
  auto it = std::find_if(t_stack.rbegin(), t_stack.rend(), [&](const Entry& e) { return e.owner == owner; });
  if (it != t_stack.rend()) t_stack.erase(std::next(it).base());
}

void forget_strategy(const Strategy* strategy) noexcept {
  std::erase_if(t_stack, [&](const Entry& e) { return e.mode.strategy == strategy; });
}

void transfer_mode(const void* from, const void* to) noexcept {
  for (Entry& e : t_stack) {
    if (e.owner == from) e.owner = to;
  }
}

void require_cross_replica_or_default(const Strategy& strategy, const char* method, const char* hint) {
  const ThreadMode& mode = current_mode();
  if (mode.cross_replica && mode.strategy == &strategy) return;
  if (mode.replica_context == &default_replica_context()) return;  // no scope: the default context
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

ReplicaContext* get_replica_context() { return detail::current_mode().replica_context; }

Strategy* get_cross_replica_context() {
  const detail::ThreadMode& mode = detail::current_mode();
  return mode.cross_replica ? mode.strategy : nullptr;
}

bool in_cross_replica_context() { return detail::current_mode().cross_replica; }

bool has_strategy() { return detail::current_mode().strategy != &detail::default_strategy(); }

Strategy& get_strategy() { return *detail::current_mode().strategy; }

Device default_device() {
  const ReplicaContext* context = detail::current_mode().replica_context;
  return context != nullptr ? context->device() : Device::cpu();
}

}  // namespace distribute
