// StrategyExtended: the backend side of a Strategy (tf.distribute.StrategyExtended). A strategy
// decides where replicas run (call_for_each_replica) and how values cross devices (reduce_to,
// batch_reduce_to, gather_to); Strategy's convenience methods are written on top of these.
//
// Context contract: call_for_each_replica, reduce_to, batch_reduce_to, gather_to and update
// require the strategy's cross-replica context (its scope or a merge_fn) or the default context;
// in a replica context they throw FailedPreconditionError.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "distribute/collective/communication_options.h"
#include "distribute/device/reduce_op.h"
#include "distribute/device/device.h"
#include "distribute/device/tensor.h"
#include "distribute/fwd.h"
#include "distribute/replica/collective_stats.h"
#include "distribute/strategy/context.h"
#include "distribute/values/distributed_values.h"
#include "distribute/values/value_context.h"

namespace distribute {

namespace collective {
class Communicator;  // src/collective/communicator.h
}  // namespace collective
class StrategyExtended;
namespace cluster {
class Coordinator;  // src/cluster/coordinator.h
}  // namespace cluster
namespace detail {
class Mutex;  // src/base/mutex.h
}  // namespace detail
namespace input::internal {
class WorkerAgreement;  // distribute/input/internal/worker_agreement.h
}  // namespace input::internal

class StrategyExtended {
 public:
  virtual ~StrategyExtended() = default;
  StrategyExtended(const StrategyExtended&) = delete;
  StrategyExtended& operator=(const StrategyExtended&) = delete;

  // Every worker's replicas: num_workers() * num_local_replicas().
  int num_replicas_in_sync() const { return num_workers() * num_local_replicas(); }
  // The devices this worker's replicas run on, in replica order; and where variables live (the
  // same here).
  const std::vector<Device>& worker_devices() const { return worker_devices_; }
  const std::vector<Device>& parameter_devices() const { return worker_devices_; }
  // The options every collective of this strategy starts from (a constructor argument).
  const CommunicationOptions& default_options() const { return default_options_; }

  // This process's place in the job. A strategy of one process is its only worker; a multi-worker
  // strategy overrides num_workers and worker_id. Worker 0 is the chief: it alone writes
  // checkpoints and summaries, so that workers sharing a file system do not overwrite each other.
  virtual int num_workers() const { return 1; }
  virtual int worker_id() const { return 0; }
  int num_local_replicas() const { return static_cast<int>(worker_devices_.size()); }
  bool in_multi_worker_mode() const { return num_workers() > 1; }
  bool should_checkpoint() const { return worker_id() == 0; }
  bool should_save_summary() const { return worker_id() == 0; }
  // The input pipeline this worker runs: InputContext(num_workers(), worker_id(), num_replicas_in_sync()).
  InputContext input_context() const { return InputContext(num_workers(), worker_id(), num_replicas_in_sync()); }

  // Calls fn once per replica, each in its replica context, and returns when all have returned.
  // The first exception raised by a replica (or a merge_fn) is rethrown here, with its type.
  virtual void call_for_each_replica(absl::FunctionRef<void(ReplicaContext&)> fn) = 0;

  // Reduces value across replicas onto `destination`, through the strategy's backend: where the
  // values are on GPUs, the reduction runs on a GPU, not through host memory.
  virtual Tensor reduce_to(ReduceOp op, const DistributedValues<Tensor>& value, const Device& destination,
                           const CommunicationOptions& options = {});
  // All-reduce flavour: the result is copied to each destination's device.
  virtual Mirrored<Tensor> reduce_to(ReduceOp op, const DistributedValues<Tensor>& value,
                                     const DistributedValues<Tensor>& destinations,
                                     const CommunicationOptions& options = {});
  // Several reduce_to's at once.
  virtual std::vector<Tensor> batch_reduce_to(
      ReduceOp op, const std::vector<std::pair<DistributedValues<Tensor>, Device>>& value_destination_pairs,
      const CommunicationOptions& options = {});
  // Concatenates value's components along `axis` onto `destination`.
  virtual Tensor gather_to(const DistributedValues<Tensor>& value, const Device& destination, int axis,
                           const CommunicationOptions& options = {});

  // Calls fn(component) for each component of var (its value on each replica device) and
  // returns the results as a Mirrored value (tf's extended.update).
  template <class Fn>
  auto update(const Mirrored<Tensor>& var, Fn&& fn);
  // For a Variable: calls fn(component_i, args_i...) for each of its components, where args_i is
  // component i of a PerReplica / Mirrored argument and any other argument as it is; fn may
  // write to the component (a Tensor handle sharing its storage). Returns Mirrored<R>, or nothing
  // when fn returns void. InvalidArgumentError for a variable of another strategy. Defined in
  // distribute/variables/variable.h, which a caller holding a Variable includes.
  template <class Fn, class... Args>
  auto update(const Variable& var, Fn&& fn, Args&&... args);
  // True when v was created for this strategy: under its scope (or, for the default strategy,
  // outside any scope). Defined in distribute/variables/variable.h.
  inline bool variable_created_in_scope(const Variable& v) const;

  Strategy& container_strategy() const { return container_; }

  // Straggler figures of this worker's replicas over their collectives since the strategy was made
  // or reset_collective_stats() last ran (distribute/replica/collective_stats.h): always kept, at
  // two readings of the CPU's tick counter per waiting replica per collective (a few nanoseconds
  // each). The first call in a process takes about 5 ms more, to measure the counter's rate
  // against std::chrono::steady_clock. OneDeviceStrategy and the default
  // strategy have no replicas to list. Outside a run's function, as reduce_to. A multi-worker
  // strategy lists this worker's replicas only.
  virtual CollectiveStats collective_stats() const;
  virtual void reset_collective_stats() {}

  // tf.distribute's experimental_between_graph: whether each worker runs its own copy of the
  // program, as every MultiWorkerMirroredStrategy worker does (even alone), rather than one program
  // driving every replica (MirroredStrategy, OneDeviceStrategy, the default strategy).
  virtual bool experimental_between_graph() const { return false; }
  // tf.distribute's experimental_should_init: whether this worker initialises the variables it
  // creates. Unlike should_checkpoint(), true on every worker: the chief and each
  // MultiWorkerMirroredStrategy worker create and initialise their own copies.
  bool experimental_should_init() const { return true; }

  // For the library's own layers (src/strategy/cross_worker.h), of types a program cannot use: how
  // this worker reaches the others, null for a strategy of one process; and the lock each top-level
  // run holds for the whole run, null for a strategy whose runs are not serialised (the
  // single-replica strategies run on the caller's thread).
  virtual cluster::Coordinator* coordinator() { return nullptr; }
  virtual detail::Mutex* run_mutex() { return nullptr; }

 protected:
  StrategyExtended(Strategy& container, std::vector<Device> devices, CommunicationOptions default_options);
  void require_cross_replica_or_default(const char* method, const char* hint = nullptr) const;
  // The backend of the cross-replica operations; null for a strategy of one replica, whose values
  // are only copied.
  virtual collective::Communicator* communicator() { return nullptr; }
  // What the iterators of the strategy's distributed datasets agree on each step through; none
  // for a strategy of one worker, whose input needs no agreement.
  virtual std::weak_ptr<input::internal::WorkerAgreement> input_agreement() const { return {}; }

 private:
  friend class Strategy;
  // The cross-replica operations behind Strategy::reduce / gather and reduce_to / gather_to:
  // checks, then (across workers) the workers' agreement, then the backend, which takes a
  // multi-worker step across the workers itself. `what` names the public method in messages.
  Tensor reduce_components(ReduceOp op, std::span<const Tensor> components, std::optional<int> axis,
                           const Device& destination, const CommunicationOptions& options, const char* what);
  Tensor concat_components(std::span<const Tensor> components, int axis, const Device& destination,
                           const CommunicationOptions& options, const char* what);
  // communicator(), once `options` are known to ask for no other implementation.
  collective::Communicator* checked_backend(const CommunicationOptions& options, const char* what);

  Strategy& container_;
  std::vector<Device> worker_devices_;
  CommunicationOptions default_options_;
};

template <class Fn>
auto StrategyExtended::update(const Mirrored<Tensor>& var, Fn&& fn) {
  require_cross_replica_or_default("extended().update");
  DISTRIBUTE_CHECK(var.num_replicas() == num_local_replicas(), InvalidArgumentError,
                   "extended().update: the variable has ", var.num_replicas(), " components but the strategy has ",
                   num_local_replicas(), " replicas", in_multi_worker_mode() ? " on this worker" : "");
  // Each component is passed as a handle of its own (Tensor&), through which fn may write it.
  using R = std::decay_t<std::invoke_result_t<Fn&, Tensor&>>;
  if constexpr (std::is_void_v<R>) {
    for (Tensor component : var.values()) fn(component);
  } else {
    std::vector<R> results;
    results.reserve(var.values().size());
    for (Tensor component : var.values()) results.push_back(fn(component));
    return Mirrored<R>(std::move(results));
  }
}

}  // namespace distribute
