// The extended side of single-replica strategies (default, OneDevice): the replica runs on the
// calling thread and its context has no group, so its collectives are local copies. On a GPU the
// strategy owns a stream that the calling thread uses for the length of a run, and run returns
// once that stream has drained.
#pragma once

#include <memory>

#include "device/replica_device.h"
#include "distribute/replica/replica_context.h"
#include "distribute/strategy/strategy_extended.h"

namespace distribute::detail {

class InlineExtended final : public StrategyExtended {
 public:
  InlineExtended(Strategy& container, Device device, CommunicationOptions options)
      : StrategyExtended(container, {device}, options),
        replica_device_(device.is_gpu() ? ReplicaDevice::create(device) : nullptr) {}

  void call_for_each_replica(absl::FunctionRef<void(ReplicaContext&)> fn) override;

 private:
  std::unique_ptr<ReplicaDevice> replica_device_;  // GPU only
};

}  // namespace distribute::detail
