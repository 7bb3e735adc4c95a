// distribute::CollectiveStats: straggler figures without a trace. For each of a worker's replicas,
// over its collectives (all_reduce, all_gather, reduce_scatter, merge_call) since the strategy was
// made or its figures reset: how long it waited for the others and how often it was the last to
// arrive, the one the others waited for. StrategyExtended::collective_stats() returns them.
#pragma once

#include <cstdint>
#include <vector>

namespace distribute {

struct ReplicaCollectiveStats {
  int replica_id = 0;  // the global id (replica_id_in_sync_group)
  std::int64_t collectives = 0;
  // Of those, how many it reached when every other replica of its worker was there already.
  std::int64_t last_arrivals = 0;
  // The time it waited in them for the other replicas of its worker (and, through them, for the
  // other workers): from its arrival until it was released, less the steps across the workers
  // (CollectiveStats::cross_worker_seconds).
  double wait_seconds = 0;
};

struct CollectiveStats {
  int worker_id = 0;
  // Across workers: the time this worker's collectives spent in their steps across the workers
  // (moving data between the processes), taken by the replica that arrived last while the others
  // waited. Counted here, not in any replica's wait_seconds, so that those show only the waiting
  // for slower replicas. 0 for a strategy of one process.
  double cross_worker_seconds = 0;
  // The payload those steps carried, in bytes as on the wire: an all_reduce of n float32 values
  // counts 4n, 2n with Compression::kBfloat16 or kFloat16, an all_gather this worker's part. (The
  // ring sends about 2 (workers - 1) / workers times that each way.) 0 for a strategy of one
  // process, and where NCCL spans the workers.
  std::int64_t cross_worker_bytes = 0;
  // The workers' votes before those steps (each is a round of small messages between the workers,
  // in which they agree on the call). One per collective and one per run's end, except that async
  // collectives already queued behind a voted call, alike on every replica and worker, are agreed
  // on in that call's vote and take none of their own (docs/overlap.md). 0 for one process.
  std::int64_t cross_worker_votes = 0;
  // This worker's replicas, in replica order.
  std::vector<ReplicaCollectiveStats> replicas;

  // The replica that arrived last most often (the lowest id among equals), or null without any
  // collective.
  const ReplicaCollectiveStats* slowest() const {
    const ReplicaCollectiveStats* out = nullptr;
    for (const ReplicaCollectiveStats& r : replicas) {
      if (r.collectives > 0 && (out == nullptr || r.last_arrivals > out->last_arrivals)) out = &r;
    }
    return out;
  }
};

}  // namespace distribute
