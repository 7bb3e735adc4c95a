// OneDeviceStrategy: one replica on one device, on the calling thread.
#include "distribute/strategy/one_device_strategy.h"

#include "absl/strings/str_cat.h"
#include "device/gpu_runtime.h"
#include "distribute/device/gpu.h"
#include "strategy/inline_extended.h"

namespace distribute {

OneDeviceStrategy::OneDeviceStrategy(std::string_view device, CommunicationOptions options) {
  detail::check_timeout(options.timeout, "OneDeviceStrategy: options.timeout", "no timeout");
  Device parsed = Device::parse(device);
  DISTRIBUTE_CHECK(parsed.is_cpu() || detail::gpu::built(), UnimplementedError, "OneDeviceStrategy(\"",
                   std::string(device),
                   "\"): this build of distribute has no GPU backend (reconfigure with -DDISTRIBUTE_WITH_CUDA=ON)");
  if (parsed.is_gpu()) physical_gpu_of(parsed);  // OutOfRangeError when it does not exist
  set_extended(std::make_unique<detail::InlineExtended>(*this, parsed, options));
}

std::string OneDeviceStrategy::name() const {
  return absl::StrCat("OneDeviceStrategy(", extended().worker_devices()[0].short_name(), ")");
}

}  // namespace distribute
