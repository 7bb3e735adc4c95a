// distribute::detail: collective fingerprints. Before any data moves, the replicas' calls to one
// collective are compared field by field (kind, reduce op, axis, nest structure, dtypes, shapes,
// options, merge_fn type). A difference becomes an error naming the replicas and the differing
// field, e.g.
//   all_reduce #3: replica 1 passed float32[10], replica 0 passed float32[12]
//   replica 2 called all_gather where replicas 0, 1, 3 called all_reduce (collective #5)
// It is always on. Leaves are compared through each call's leaf_digest (see LeafDigest), built on
// the replica's own thread, so the replica that completes the rendezvous compares one word per
// peer; only when digests differ are the leaves compared one by one, to name the first that does.
#pragma once

#include <exception>
#include <span>
#include <string>
#include <vector>

#include "distribute/replica/internal/collective_call.h"

namespace distribute::detail {

// Null when every replica's call matches; otherwise the error to raise on every replica
// (InvalidArgumentError for differing values, FailedPreconditionError for differing calls).
// calls[r] is the call of the replica with global id first_id + r, as messages name it.
std::exception_ptr compare_calls(std::span<CollectiveCall* const> calls, int first_id = 0);

// "replica 1" or "replicas 0, 2, 3".
std::string replicas_text(const std::vector<int>& replicas);

// "all_reduce #3".
std::string call_name(const CollectiveCall& call);

}  // namespace distribute::detail
