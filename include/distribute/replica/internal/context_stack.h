// distribute::detail, not API: the per-thread stack of contexts that tf.distribute keeps per
// thread. An entry says which strategy is in scope and whether the thread is in cross-replica
// context (in a scope or a merge_fn) or in one replica's context (inside run). An empty stack is
// the default context; what the default context offers (the default strategy and its replica
// context) belongs to the strategy layer (strategy/context.h), which reads this stack.
#pragma once

#include "distribute/fwd.h"

namespace distribute::detail {

struct ThreadMode {
  Strategy* strategy = nullptr;                // null: the default context
  ReplicaContext* replica_context = nullptr;  // null in cross-replica and default context
  bool cross_replica = false;
  // How many run()s this thread is nested in: 0 outside, 1 in a merge_fn of a run, ...
  int run_depth = 0;
};

// The top of this thread's stack; a mode with no strategy when the stack is empty.
const ThreadMode& current_mode();

// Pushes a mode for the lifetime of the object.
class ScopedMode {
 public:
  explicit ScopedMode(const ThreadMode& mode);
  ~ScopedMode();
  ScopedMode(const ScopedMode&) = delete;
  ScopedMode& operator=(const ScopedMode&) = delete;
};

// For scopes that outlive a C++ scope (StrategyScope): push, and pop the entry pushed for `owner`.
void push_mode(const ThreadMode& mode, const void* owner);
void pop_mode(const void* owner) noexcept;
// Removes this thread's entries of a strategy being destroyed, so a scope guard that outlives its
// strategy leaves nothing dangling behind.
void forget_strategy(const Strategy* strategy) noexcept;

}  // namespace distribute::detail
