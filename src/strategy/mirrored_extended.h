// distribute::detail: MirroredStrategy's engine for the strategies built on it. The multi-worker
// strategy (src/multi_worker/) is MirroredStrategy's replicas on each worker, joined to the other workers
// through their cluster::Coordinator; it lives in its own library, so it builds the engine through
// here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distribute/strategy/mirrored_strategy.h"
#include "cluster/coordinator.h"

namespace distribute::detail {

// MirroredStrategy's device list rules ("CPU:0", "GPU:1"; empty: every GPU, else CPU:0).
std::vector<Device> parse_mirrored_devices(const std::vector<std::string>& specs);

// The extended of a MirroredStrategy over `devices`, joined to the other workers through
// `coordinator` (null: one process).
std::unique_ptr<StrategyExtended> make_mirrored_extended(Strategy& container, std::vector<Device> devices,
                                                         MirroredStrategyOptions options,
                                                         std::shared_ptr<cluster::Coordinator> coordinator);

}  // namespace distribute::detail
