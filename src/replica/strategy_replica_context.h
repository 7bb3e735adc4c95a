// distribute::detail::StrategyReplicaContext: the ReplicaContext a strategy makes for each of its
// replicas (and the default strategy's). ReplicaContext's constructor is not API: it takes the
// replica group, which only the library has; this is where the library reaches it.
#pragma once

#include <utility>

#include "distribute/replica/replica_context.h"

namespace distribute::detail {

class StrategyReplicaContext final : public ReplicaContext {
 public:
  StrategyReplicaContext(Strategy& strategy, int replica_id, int num_replicas, ReplicaGroup* group, Device device,
                         int run_depth, int local_replica_id = -1)
      : ReplicaContext(strategy, replica_id, num_replicas, group, std::move(device), run_depth, local_replica_id) {}

  // The default strategy's replica context, usable on any thread outside every scope.
  static StrategyReplicaContext* make_default(Strategy& default_strategy) {
    return new StrategyReplicaContext(default_strategy);
  }

 private:
  explicit StrategyReplicaContext(Strategy& default_strategy)
      : ReplicaContext(default_strategy, 0, 1, nullptr, Device::cpu(), 0, -1, /*default_context=*/true) {}
};

}  // namespace distribute::detail
