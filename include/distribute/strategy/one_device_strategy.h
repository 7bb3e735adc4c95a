// OneDeviceStrategy: one replica on one device (tf.distribute.OneDeviceStrategy). run() calls fn
// on the calling thread in the replica context; collectives are copies onto the device.
#pragma once

#include <string_view>

#include "distribute/strategy/strategy.h"

namespace distribute {

class OneDeviceStrategy final : public Strategy {
 public:
  // Throws InvalidArgumentError for a bad device string, UnimplementedError for a GPU in a build
  // without CUDA.
  explicit OneDeviceStrategy(std::string_view device, CommunicationOptions options = {});
  std::string name() const override;
};

}  // namespace distribute
