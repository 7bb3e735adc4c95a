// The default strategy and single-replica run on the calling thread (also OneDeviceStrategy's).
#include "distribute/strategy/default_strategy.h"

#include "replica/strategy_replica_context.h"
#include "strategy/inline_extended.h"

namespace distribute {

namespace detail {

void InlineExtended::call_for_each_replica(absl::FunctionRef<void(ReplicaContext&)> fn) {
  require_cross_replica_or_default("extended().call_for_each_replica");
  const ThreadMode& mode = current_mode();
  const int depth = mode.cross_replica ? mode.run_depth : 0;
  StrategyReplicaContext context(container_strategy(), 0, 1, nullptr, worker_devices()[0], depth);
  ScopedMode replica_mode(ThreadMode{&container_strategy(), &context, false, depth});
  if (!replica_device_) {
    fn(context);
    return;
  }
  replica_device_->bind_thread();
  struct Unbind {
    ReplicaDevice* device;
    ~Unbind() { device->unbind_thread(); }
  } unbind{replica_device_.get()};
  fn(context);
  wait_for_device_work(*replica_device_, 0, default_options().timeout, [] { return false; }, "the end of run");
}

}  // namespace detail

DefaultStrategy::DefaultStrategy() {
  set_extended(std::make_unique<detail::InlineExtended>(*this, Device::cpu(), CommunicationOptions{}));
}

}  // namespace distribute
