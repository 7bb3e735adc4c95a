// MirroredStrategy: devices, backend choice, the levels of replica threads, and run.
#include "distribute/strategy/mirrored_strategy.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/mutex.h"
#include "base/timeline.h"
#include "cluster/hierarchical_communicator.h"
#include "collective/one_device/communicator.h"
#include "device/gpu_runtime.h"
#include "device/replica_device.h"
#include "collective/cpu/communicator.h"
#include "distribute/config.h"
#include "distribute/device/gpu.h"
#include "distribute/input/internal/worker_agreement.h"
#include "cluster/coordinator.h"
#include "replica/replica_group.h"
#include "replica/replica_runner.h"
#include "replica/strategy_replica_context.h"
#include "strategy/cross_device_ops.h"
#include "strategy/mirrored_extended.h"
#if DISTRIBUTE_HAS_NCCL
#include "collective/nccl/communicator.h"
#endif

namespace distribute {
namespace {

constexpr int kMaxRunDepth = 8;
// After a failed run's communicators are aborted, their streams drain quickly; this bounds it.
constexpr auto kDrainAfterAbort = std::chrono::seconds(30);

std::vector<Device> parse_devices(const std::vector<std::string>& specs) {
  if (specs.empty()) {
    std::vector<Device> gpus = list_logical_gpus();
    return gpus.empty() ? std::vector<Device>{Device::cpu(0)} : gpus;
  }
  std::vector<Device> devices;
  std::set<Device> seen;
  for (const std::string& spec : specs) {
    Device device = Device::parse(spec);
    DISTRIBUTE_CHECK(seen.insert(device).second, InvalidArgumentError, "MirroredStrategy: device \"", spec,
                     "\" is listed twice (as ", device.short_name(), "); each replica needs its own device");
    // A list that mixes the types is wrong in every build, so it is named first.
    DISTRIBUTE_CHECK(devices.empty() || devices[0].type() == device.type(), InvalidArgumentError,
                     "MirroredStrategy: devices ", devices[0].short_name(), " and ", device.short_name(),
                     " mix CPUs and GPUs; list devices of one type");
    DISTRIBUTE_CHECK(device.is_cpu() || detail::gpu::built(), UnimplementedError, "MirroredStrategy: device \"", spec,
                     "\" is a GPU and this build of distribute has no GPU backend "
                     "(reconfigure with -DDISTRIBUTE_WITH_CUDA=ON)");
    if (device.is_gpu()) physical_gpu_of(device);  // OutOfRangeError when it does not exist
    devices.push_back(device);
  }
  return devices;
}

detail::Backend choose_backend(const std::vector<Device>& devices, const MirroredStrategyOptions& options) {
  std::vector<int> physical;
  for (const Device& d : devices) physical.push_back(d.is_gpu() ? physical_gpu_of(d) : -1);
  return detail::choose_backend(options.cross_device_ops, options.communication.implementation, devices, physical,
                                DISTRIBUTE_HAS_NCCL != 0);
}

std::vector<detail::ReplicaDevice*> raw_pointers(const std::vector<std::unique_ptr<detail::ReplicaDevice>>& devices) {
  std::vector<detail::ReplicaDevice*> out;
  for (const auto& d : devices) out.push_back(d.get());
  return out;
}

// This worker's replicas' backend.
std::unique_ptr<collective::Communicator> make_local_communicator(
    detail::Backend backend, const std::vector<std::unique_ptr<detail::ReplicaDevice>>& devices,
    const detail::WaitPolicy& policy, [[maybe_unused]] cluster::Coordinator* coordinator,
    [[maybe_unused]] std::chrono::duration<double> timeout) {
  const int n = static_cast<int>(devices.size());
  std::vector<detail::ReplicaDevice*> raw = raw_pointers(devices);
  switch (backend) {
    case detail::Backend::kSharedMemory:
      return std::make_unique<collective::cpu::CpuCommunicator>(n, policy);
    case detail::Backend::kReductionToOneDevice:
      return std::make_unique<collective::one_device::OneDeviceCommunicator>(std::move(raw), policy);
    case detail::Backend::kNccl:
#if DISTRIBUTE_HAS_NCCL
      if (coordinator != nullptr) {
        // One communicator over every worker's GPUs; the chief's id reaches the others through
        // the coordinator, as the strategy's other cross-worker steps do.
        collective::nccl::NcclSpan span{
            coordinator->num_workers() * n, coordinator->worker_id() * n, [coordinator, timeout](std::span<std::byte> id) {
              const std::string chief = coordinator->broadcast_from_chief(
                  std::string(reinterpret_cast<const char*>(id.data()), id.size()), timeout,
                  "creating the NCCL communicator across workers");
              std::memcpy(id.data(), chief.data(), std::min(chief.size(), id.size()));
            }};
        return std::make_unique<collective::nccl::NcclCommunicator>(std::move(raw), std::move(span));
      }
      return std::make_unique<collective::nccl::NcclCommunicator>(std::move(raw));
#else
      break;
#endif
  }
  throw InternalError("make_communicator: backend not built");
}

// The backend of a level's replicas, joined to the other workers of `workers` unless it is null.
std::unique_ptr<collective::Communicator> make_communicator(
    detail::Backend backend, const std::vector<std::unique_ptr<detail::ReplicaDevice>>& devices,
    const detail::WaitPolicy& policy, cluster::Coordinator* coordinator, std::chrono::duration<double> timeout) {
  std::unique_ptr<collective::Communicator> local =
      make_local_communicator(backend, devices, policy, coordinator, timeout);
  if (coordinator == nullptr) return local;
  return std::make_unique<cluster::HierarchicalCommunicator>(std::move(local), coordinator->group(),
                                                             static_cast<int>(devices.size()));
}

std::vector<std::unique_ptr<detail::ReplicaDevice>> make_replica_devices(const std::vector<Device>& devices) {
  std::vector<std::unique_ptr<detail::ReplicaDevice>> out;
  for (const Device& d : devices) out.push_back(detail::ReplicaDevice::create(d));
  return out;
}

// Replica threads may spin while they wait only when every worker's replicas on this machine
// together fit on its cores. When they do not and other workers share the machine, a waiting
// replica parks at once: yielding would still take turns on the cores from the other processes'
// replicas and MPI progress, which the waits across workers depend on.
detail::WaitPolicy wait_policy(int local_replicas, const cluster::Coordinator* coordinator) {
  const int on_host = coordinator != nullptr ? coordinator->workers_on_this_host() : 1;
  detail::WaitPolicy policy = detail::WaitPolicy::for_threads(local_replicas * on_host);
  if (on_host > 1 && policy.spin.count() == 0) policy.yield = std::chrono::nanoseconds::zero();
  return policy;
}

// The global id of this worker's first replica, of `local`.
int first_global_id(const cluster::Coordinator* coordinator, int local) {
  return coordinator != nullptr ? coordinator->worker_id() * local : 0;
}

// Everything one level of run needs: threads, the collective group and the replica contexts.
// A run from inside a merge_fn uses the next level, so its replicas are separate from the
// paused ones.
struct RunLevel {
  RunLevel(Strategy& strategy, const std::vector<Device>& devices, int depth, const MirroredStrategyOptions& options,
           detail::Backend backend, cluster::Coordinator* coordinator)
      : replica_devices(make_replica_devices(devices)),
        bound(devices.size(), 0),
        policy(wait_policy(static_cast<int>(devices.size()), coordinator)),
        runner(static_cast<int>(devices.size()), depth == 0 ? "distribute" : absl::StrCat("distrib.", depth),
               options.pin_threads, policy),
        group(static_cast<int>(devices.size()),
              make_communicator(backend, replica_devices, policy, coordinator, options.communication.timeout),
              policy, options.communication, coordinator, first_global_id(coordinator, static_cast<int>(devices.size())),
              raw_pointers(replica_devices)) {
    const int local = static_cast<int>(devices.size());
    const int first_id = first_global_id(coordinator, local);
    const int global = coordinator != nullptr ? coordinator->num_workers() * local : local;
    contexts.reserve(devices.size());
    for (int r = 0; r < local; ++r) {
      contexts.push_back(std::make_unique<detail::StrategyReplicaContext>(strategy, first_id + r, global, &group,
                                                          devices[static_cast<std::size_t>(r)], depth, r));
    }
  }

  // Waits for replica r's device work at the end of its part of a run. A failed run aborts the
  // replica's pending collectives (so its stream cannot wait forever for a peer) before draining.
  void finish_device_work(int r, std::chrono::duration<double> timeout) {
    detail::ReplicaDevice& device = *replica_devices[static_cast<std::size_t>(r)];
    if (device.stream() == nullptr) return;  // host work is done when issued
    try {
      auto result = device.synchronize(detail::deadline_after(timeout), [this] { return group.failed(); });
      // Collectives across processes were matched on every worker before they were issued, so
      // they complete; aborting them would strand the other workers' kernels.
      if (result == detail::ReplicaDevice::SyncResult::kCancelled && group.communicator().spans_processes()) {
        result = device.synchronize(detail::deadline_after(timeout), [] { return false; });
      }
      if (result == detail::ReplicaDevice::SyncResult::kDone) return;
      group.communicator().abort(r);
      if (result == detail::ReplicaDevice::SyncResult::kTimedOut) {
        throw DeadlineExceededError(absl::StrCat("timed out after ", timeout.count(), " s: the work of replica ", r,
                                                 " on ", device.device().short_name(),
                                                 " did not finish; its collectives were aborted"));
      }
      if (device.synchronize(detail::Clock::now() + kDrainAfterAbort, [] { return false; }) !=
          detail::ReplicaDevice::SyncResult::kDone) {
        throw InternalError(absl::StrCat("the work of replica ", r, " on ", device.device().short_name(),
                                         " did not finish ", kDrainAfterAbort.count(),
                                         " s after its collectives were aborted"));
      }
    } catch (...) {
      group.fail(r, std::current_exception());
    }
  }

  std::vector<std::unique_ptr<detail::ReplicaDevice>> replica_devices;
  std::vector<unsigned char> bound;  // bound[r]: replica r's thread has bound its device
  detail::Mutex run_mu;  // one run at a time per level: held for the whole run
  detail::WaitPolicy policy;
  detail::ReplicaRunner runner;
  detail::ReplicaGroup group;
  std::vector<std::unique_ptr<detail::StrategyReplicaContext>> contexts;
};

class MirroredExtended final : public StrategyExtended {
 public:
  MirroredExtended(Strategy& container, std::vector<Device> devices, MirroredStrategyOptions options,
                   std::shared_ptr<cluster::Coordinator> coordinator)
      : StrategyExtended(container, std::move(devices), options.communication),
        options_(options),
        backend_(choose_backend(worker_devices(), options)),
        coordinator_(std::move(coordinator)),
        input_agreement_(coordinator_ != nullptr && coordinator_->num_workers() > 1
                             ? std::make_shared<input::internal::WorkerAgreement>(coordinator_,
                                                                                  options.communication.timeout)
                             : nullptr) {
    detail::check_timeout(options.communication.timeout,
                          coordinator_ != nullptr ? "MultiWorkerMirroredStrategy: options.communication.timeout"
                                              : "MirroredStrategy: options.communication.timeout",
                          "no timeout");
    DISTRIBUTE_CHECK(coordinator_ == nullptr || worker_devices()[0].is_cpu() || backend_ == detail::Backend::kNccl,
                     InvalidArgumentError, "MultiWorkerMirroredStrategy: GPU replicas across workers are ranks of one "
                     "NCCL communicator, which needs ", DISTRIBUTE_HAS_NCCL ? "one physical GPU per replica; "
                     "list GPUs that are not logical GPUs of one physical GPU" : "NCCL, and this build of distribute "
                     "has none (reconfigure with -DDISTRIBUTE_WITH_NCCL=ON)");
    if (coordinator_ != nullptr) detail::timeline::set_worker(coordinator_->worker_id());
    detail::MutexLock lock(levels_mu_);
    levels_[0] = std::make_unique<RunLevel>(container, worker_devices(), 0, options_, backend_, coordinator_.get());
    level0_ = levels_[0].get();
  }

  // This worker leaves the others once its replicas are gone.
  ~MirroredExtended() override {
    {
      detail::MutexLock lock(levels_mu_);
      for (auto& level : levels_) level.reset();
    }
    if (coordinator_ != nullptr) coordinator_->leave();
  }

  int num_workers() const override { return coordinator_ != nullptr ? coordinator_->num_workers() : 1; }
  int worker_id() const override { return coordinator_ != nullptr ? coordinator_->worker_id() : 0; }
  // A multi-worker strategy: one process per worker, each running the whole program.
  bool experimental_between_graph() const override { return coordinator_ != nullptr; }

  // The top level's replicas: a nested run's are its own threads' and not counted.
  CollectiveStats collective_stats() const override {
    CollectiveStats stats = StrategyExtended::collective_stats();
    for (int r = 0; r < level0_->group.size(); ++r) stats.replicas.push_back(level0_->group.stats(r));
    stats.cross_worker_seconds = level0_->group.cross_process_seconds();
    stats.cross_worker_bytes = level0_->group.cross_process_bytes();
    stats.cross_worker_votes = level0_->group.cross_process_votes();
    return stats;
  }
  void reset_collective_stats() override {
    require_cross_replica_or_default("extended().reset_collective_stats");
    level0_->group.reset_stats();
  }

  detail::Backend backend() const { return backend_; }

  void call_for_each_replica(absl::FunctionRef<void(ReplicaContext&)> fn) override {
    require_cross_replica_or_default("extended().call_for_each_replica");
    const detail::ThreadMode& mode = detail::current_mode();
    const int depth = mode.cross_replica && mode.strategy == &container_strategy() ? mode.run_depth : 0;
    RunLevel& level = level_at(depth);
    detail::MutexLock run_lock(level.run_mu);
    level.group.prepare_run();
    // Captured by value, so that the copy a replica thread is handed holds everything it reads
    // (and word-sized, so that the copy has no padding whose bytes could differ between runs).
    level.runner.run([this, &level, fn, depth = static_cast<std::intptr_t>(depth)](int r) {
      ReplicaContext& context = *level.contexts[static_cast<std::size_t>(r)];
      detail::ReplicaDevice& device = *level.replica_devices[static_cast<std::size_t>(r)];
      detail::ScopedMode replica_mode(detail::ThreadMode{&container_strategy(), &context, false, static_cast<int>(depth)});
      // Replica 0 runs on the caller's thread, which it binds for this run only; the others'
      // threads are bound once, for good.
      const bool borrowed_thread = r == 0;
      level.group.begin_replica(r);  // first: every replica begins every run, whatever fails after
      // Ends as this replica's part does, also when it failed.
      detail::timeline::Span run_span(context.replica_id_in_sync_group(), "run");
      try {
        if (borrowed_thread || !level.bound[static_cast<std::size_t>(r)]) {
          device.bind_thread();
          if (!borrowed_thread) level.bound[static_cast<std::size_t>(r)] = 1;
        }
        fn(context);
        level.group.replica_returned(r);
      } catch (...) {
        if (detail::timeline::on()) {
          detail::timeline::instant(context.replica_id_in_sync_group(), "error",
                                    detail::describe_exception(std::current_exception()));
        }
        level.group.fail(r, std::current_exception());
        // Released by the failure, the collectives it issued without waiting end before its part.
        level.group.drain_async(r);
      }
      level.finish_device_work(r, options_.communication.timeout);
      if (borrowed_thread) device.unbind_thread();
    });
    level.group.finish_run();
    if (std::exception_ptr error = level.group.first_error()) std::rethrow_exception(error);
  }

 protected:
  collective::Communicator* communicator() override {
    detail::MutexLock lock(levels_mu_);
    return &levels_[0]->group.communicator();
  }
  cluster::Coordinator* coordinator() override { return coordinator_.get(); }
  detail::Mutex* run_mutex() override { return &level0_->run_mu; }
  std::weak_ptr<input::internal::WorkerAgreement> input_agreement() const override { return input_agreement_; }

 private:
  RunLevel& level_at(int depth) {
    DISTRIBUTE_CHECK(depth < kMaxRunDepth, FailedPreconditionError, "run nested ", depth,
                     " levels deep through merge_fn; at most ", kMaxRunDepth, " levels are supported");
    if (depth == 0) return *level0_;
    detail::MutexLock lock(levels_mu_);
    auto& level = levels_[static_cast<std::size_t>(depth)];
    if (!level) {
      level = std::make_unique<RunLevel>(container_strategy(), worker_devices(), depth, options_, backend_,
                                         coordinator_.get());
    }
    return *level;
  }

  const MirroredStrategyOptions options_;
  const detail::Backend backend_;
  // Declared before the levels: their groups use these until they are gone.
  const std::shared_ptr<cluster::Coordinator> coordinator_;
  // Across workers only: what the iterators of this strategy's distributed datasets agree through.
  const std::shared_ptr<input::internal::WorkerAgreement> input_agreement_;
  detail::Mutex levels_mu_;
  std::array<std::unique_ptr<RunLevel>, kMaxRunDepth> levels_ ABSL_GUARDED_BY(levels_mu_);
  RunLevel* level0_ = nullptr;  // levels_[0], made by the constructor: every top-level run, without the lock
};

}  // namespace

namespace detail {

std::vector<Device> parse_mirrored_devices(const std::vector<std::string>& specs) { return parse_devices(specs); }

std::unique_ptr<StrategyExtended> make_mirrored_extended(Strategy& container, std::vector<Device> devices,
                                                         MirroredStrategyOptions options,
                                                         std::shared_ptr<cluster::Coordinator> coordinator) {
  return std::make_unique<MirroredExtended>(container, std::move(devices), options, std::move(coordinator));
}

}  // namespace detail

MirroredStrategy::MirroredStrategy(std::vector<std::string> devices)
    : MirroredStrategy(std::move(devices), MirroredStrategyOptions{}) {}

MirroredStrategy::MirroredStrategy(std::vector<std::string> devices, MirroredStrategyOptions options) {
  set_extended(std::make_unique<MirroredExtended>(*this, parse_devices(devices), options, nullptr));
}

MirroredStrategy::~MirroredStrategy() = default;

std::string MirroredStrategy::name() const {
  std::vector<std::string> names;
  for (const Device& d : extended().worker_devices()) names.push_back(d.short_name());
  return absl::StrCat("MirroredStrategy(", absl::StrJoin(names, ", "), ")");
}

std::string_view MirroredStrategy::cross_device_ops() const {
  return detail::backend_name(static_cast<const MirroredExtended&>(extended()).backend());
}

}  // namespace distribute
