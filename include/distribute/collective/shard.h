// distribute: which part of a reduce_scatter's result each replica gets (ReplicaContext::
// reduce_scatter, and the optimizers that keep their state in shards). A leaf of `count` elements,
// flattened, is cut into one contiguous shard per replica in replica order; the first
// count % replicas shards are one element longer than the others, so shards differ by at most one.
#pragma once

#include <cstdint>

namespace distribute {

struct Shard {
  std::int64_t begin = 0;  // the first element's index in the flattened leaf
  std::int64_t size = 0;
};

// Replica `replica`'s shard of `count` elements among `replicas`.
constexpr Shard shard_of(std::int64_t count, std::int64_t replicas, std::int64_t replica) {
  const std::int64_t base = count / replicas;
  const std::int64_t longer = count % replicas;
  return Shard{replica * base + (replica < longer ? replica : longer), base + (replica < longer ? 1 : 0)};
}

}  // namespace distribute
