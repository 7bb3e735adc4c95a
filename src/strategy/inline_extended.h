// The extended side of single-replica strategies (default, OneDevice): the replica runs on the
// calling thread and its context has no group, so its collectives are local copies.
#pragma once

#include "distribute/replica/replica_context.h"
#include "distribute/strategy/strategy_extended.h"

namespace distribute::detail {

class InlineExtended final : public StrategyExtended {
 public:
  InlineExtended(Strategy& container, Device device, CommunicationOptions options)
      : StrategyExtended(container, {device}, options) {}

  void call_for_each_replica(absl::FunctionRef<void(ReplicaContext&)> fn) override;
};

}  // namespace distribute::detail
