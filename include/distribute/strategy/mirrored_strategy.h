// MirroredStrategy: synchronous replicas on several devices of one machine
// (tf.distribute.MirroredStrategy). Each replica has its own persistent thread, created once with
// the strategy, so run() costs microseconds. "CPU:k" names logical CPU devices: N CPU replicas on
// one host, collectives through shared memory (collective/cpu/).
#pragma once

#include <string>
#include <vector>

#include "distribute/strategy/strategy.h"

namespace distribute {

struct MirroredStrategyOptions {
  // Defaults for every collective (a timeout here bounds every wait of every run).
  CommunicationOptions communication;
  // Pin replica thread i to core i % cores (off by default).
  bool pin_threads = false;
};

class MirroredStrategy final : public Strategy {
 public:
  // No devices: every GPU, or a single "CPU:0" replica when there is none. Throws
  // InvalidArgumentError for bad or duplicate device strings, UnimplementedError for GPUs in a
  // build without CUDA.
  explicit MirroredStrategy(std::vector<std::string> devices = {});
  MirroredStrategy(std::vector<std::string> devices, MirroredStrategyOptions options);
  ~MirroredStrategy() override;
  std::string name() const override;
};

}  // namespace distribute
