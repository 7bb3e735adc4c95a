#include "distribute/strategy/mirrored_strategy.h"

#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/collective/cpu/communicator.h"
#include "distribute/collective/group.h"
#include "replica/replica_runner.h"

namespace distribute {
namespace {

constexpr int kMaxRunDepth = 8;

std::vector<Device> parse_devices(const std::vector<std::string>& specs) {
  if (specs.empty()) return {Device::cpu(0)};  // no GPU backend in this build
  std::vector<Device> devices;
  std::set<Device> seen;
  for (const std::string& spec : specs) {
    Device device = Device::parse(spec);
    DISTRIBUTE_CHECK(seen.insert(device).second, InvalidArgumentError, "MirroredStrategy: device \"", spec,
                     "\" is listed twice (as ", device.short_name(), "); each replica needs its own device");
    DISTRIBUTE_CHECK(device.is_cpu(), UnimplementedError, "MirroredStrategy: device \"", spec,
                     "\" is a GPU and this build of distribute has no GPU backend "
                     "(reconfigure with -DDISTRIBUTE_WITH_CUDA=ON)");
    devices.push_back(device);
  }
  return devices;
}

// Everything one level of run needs: threads, the collective group and the replica contexts.
// A run from inside a merge_fn uses the next level, so its replicas are separate from the
// paused ones.
struct RunLevel {
  RunLevel(Strategy& strategy, const std::vector<Device>& devices, int depth, const MirroredStrategyOptions& options)
      : runner(static_cast<int>(devices.size()), depth == 0 ? "distribute" : absl::StrCat("distrib.", depth),
               options.pin_threads),
        group(static_cast<int>(devices.size()),
              std::make_unique<collective::cpu::CpuCommunicator>(
                  static_cast<int>(devices.size()), detail::WaitPolicy::for_threads(static_cast<int>(devices.size()))),
              detail::WaitPolicy::for_threads(static_cast<int>(devices.size())), options.communication) {
    contexts.reserve(devices.size());
    for (std::size_t r = 0; r < devices.size(); ++r) {
      contexts.push_back(std::make_unique<ReplicaContext>(strategy, static_cast<int>(r),
                                                          static_cast<int>(devices.size()), &group, devices[r], depth));
    }
  }

  std::mutex run_mu;  // one run at a time per level
  detail::ReplicaRunner runner;
  collective::CollectiveGroup group;
  std::vector<std::unique_ptr<ReplicaContext>> contexts;
};

class MirroredExtended final : public StrategyExtended {
 public:
  MirroredExtended(Strategy& container, std::vector<Device> devices, MirroredStrategyOptions options)
      : StrategyExtended(container, std::move(devices), options.communication), options_(options) {
    levels_[0] = std::make_unique<RunLevel>(container, worker_devices(), 0, options_);
  }

  void call_for_each_replica(absl::FunctionRef<void(ReplicaContext&)> fn) override {
    require_cross_replica_or_default("extended().call_for_each_replica");
    const detail::ThreadMode& mode = detail::current_mode();
    const int depth = mode.cross_replica && mode.strategy == &container_strategy() ? mode.run_depth : 0;
    RunLevel& level = level_at(depth);
    std::lock_guard<std::mutex> run_lock(level.run_mu);
    level.group.reset();
    level.runner.run([&](int r) {
      ReplicaContext& context = *level.contexts[static_cast<std::size_t>(r)];
      detail::ScopedMode replica_mode(detail::ThreadMode{&container_strategy(), &context, false, depth});
      try {
        fn(context);
        level.group.replica_returned(r);
      } catch (...) {
        level.group.fail(r, std::current_exception());
      }
    });
    if (std::exception_ptr error = level.group.first_error()) std::rethrow_exception(error);
  }

 private:
  RunLevel& level_at(int depth) {
    DISTRIBUTE_CHECK(depth < kMaxRunDepth, FailedPreconditionError, "run nested ", depth,
                     " levels deep through merge_fn; at most ", kMaxRunDepth, " levels are supported");
    std::lock_guard<std::mutex> lock(levels_mu_);
    auto& level = levels_[static_cast<std::size_t>(depth)];
    if (!level) level = std::make_unique<RunLevel>(container_strategy(), worker_devices(), depth, options_);
    return *level;
  }

  const MirroredStrategyOptions options_;
  std::mutex levels_mu_;
  std::array<std::unique_ptr<RunLevel>, kMaxRunDepth> levels_;
};

}  // namespace

MirroredStrategy::MirroredStrategy(std::vector<std::string> devices)
    : MirroredStrategy(std::move(devices), MirroredStrategyOptions{}) {}

MirroredStrategy::MirroredStrategy(std::vector<std::string> devices, MirroredStrategyOptions options) {
  set_extended(std::make_unique<MirroredExtended>(*this, parse_devices(devices), options));
}

MirroredStrategy::~MirroredStrategy() = default;

std::string MirroredStrategy::name() const {
  std::vector<std::string> names;
  for (const Device& d : extended().worker_devices()) names.push_back(d.short_name());
  return absl::StrCat("MirroredStrategy(", absl::StrJoin(names, ", "), ")");
}

}  // namespace distribute
