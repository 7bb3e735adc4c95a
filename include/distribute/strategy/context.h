// Which context the calling thread is in, as tf.distribute tracks it per thread:
//   - default: no strategy in scope; get_replica_context() is the default strategy's replica
//     context and get_strategy() the default strategy (one replica, id 0);
//   - cross-replica: inside strategy.scope() or a merge_fn; get_replica_context() is nullptr;
//   - replica: inside the fn passed to run, on that replica's thread.
#pragma once

#include "distribute/fwd.h"

namespace distribute {

// The replica context of this thread: the replica's inside run, the default one outside any
// scope, nullptr in cross-replica context.
ReplicaContext* get_replica_context();
// The strategy whose cross-replica context this thread is in, else nullptr.
Strategy* get_cross_replica_context();
bool in_cross_replica_context();
// True when a strategy other than the default one is in scope (cross-replica or replica context).
bool has_strategy();
// The strategy in scope, else the default strategy.
Strategy& get_strategy();

namespace detail {

// The default strategy: one object for the whole process, never destroyed.
Strategy& default_strategy();

// Throws unless this thread may call `method` of `strategy`: in its cross-replica context, or in
// the default context. FailedPreconditionError otherwise: "requires being in cross-replica
// context" inside a replica (with `hint` saying what to use instead), "Mixing different
// distribute::Strategy objects" under another strategy's scope.
void require_cross_replica_or_default(const Strategy& strategy, const char* method, const char* hint);

}  // namespace detail
}  // namespace distribute
