// Strategy: the user's handle on a set of replicas (tf.distribute.Strategy). Write a step fn once;
// run() calls it on every replica; reduce() and gather() bring the per-replica results home.
//
//   MirroredStrategy strategy({"CPU:0", "CPU:1"});
//   PerReplica<Tensor> losses = strategy.run([](const Tensor& batch) { ... }, per_replica_batches);
//   Tensor mean_loss = strategy.reduce(ReduceOp::kMean, losses, std::nullopt);
//
// run, reduce, gather and the extended() operations require cross-replica context (inside
// scope(), inside a merge_fn) or the default context (no scope); inside a replica's fn they throw
// FailedPreconditionError. Scopes of one strategy nest; scopes of two strategies do not mix.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/data/dataset.h"
#include "distribute/input/distributed_dataset.h"
#include "distribute/nest/structure_traits.h"
#include "distribute/replica/replica_context.h"
#include "distribute/strategy/context.h"
#include "distribute/strategy/strategy_extended.h"
#include "distribute/values/distributed_values.h"
#include "distribute/values/value_context.h"

namespace distribute {

class StrategyScope;

namespace detail {

// What the objects made for a strategy (variables, optimizers) hold of it. It outlives the
// strategy: it says whether the strategy still exists (so that using a variable after its
// strategy went is an error, not a crash) and identifies the strategy by a number no other
// strategy of the process has, wherever the next one is built.
class StrategyIdentity {
 public:
  std::uint64_t id() const { return id_; }
  const std::string& name() const { return name_; }
  int num_replicas_in_sync() const { return num_replicas_in_sync_; }
  int worker_id() const { return worker_id_; }
  // The strategy; FailedPreconditionError saying that `user` (e.g. "Variable 'w'") was made for a
  // strategy that has been destroyed.
  Strategy& get(std::string_view user) const;
  // Numbers the variables created for the strategy: counted alike on every replica and worker,
  // which create them in the same order.
  std::uint64_t next_variable_number() { return variables_created_.fetch_add(1, std::memory_order_relaxed); }

 private:
  friend class distribute::Strategy;
  explicit StrategyIdentity(Strategy& strategy);
  // The strategy's name and replicas anew, after an elastic strategy's workers changed (between
  // runs, on the thread that changed them).
  void refresh(Strategy& strategy);

  const std::uint64_t id_;
  std::string name_;
  int num_replicas_in_sync_;
  int worker_id_;
  std::atomic<Strategy*> strategy_;  // null once the strategy is destroyed
  std::atomic<std::uint64_t> variables_created_{0};
};

}  // namespace detail

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  StrategyExtended& extended() { return *extended_; }
  const StrategyExtended& extended() const { return *extended_; }
  int num_replicas_in_sync() const { return extended_->num_replicas_in_sync(); }
  // E.g. "MirroredStrategy(CPU:0, CPU:1)"; used in error messages.
  virtual std::string name() const = 0;

  // Enters this strategy's cross-replica context until the returned guard is destroyed.
  [[nodiscard]] StrategyScope scope();

  // Calls fn once per replica, on that replica's thread, in its replica context. A PerReplica or
  // Mirrored argument is replaced by that replica's component; other arguments are passed to every
  // replica as they are (by reference: fn must not modify them without synchronisation). Returns
  // PerReplica<R> for fn's result type R, or nothing when fn returns void.
  template <class Fn, class... Args>
  auto run(Fn&& fn, Args&&... args);

  // Reduces across replicas (axis = nullopt) or also across dimension `axis` of every component
  // (MEAN then divides by the true element count). V: PerReplica/Mirrored of Tensor or of an
  // arithmetic scalar, or a plain Tensor or scalar (a value that is the same on every replica).
  // Returns a Tensor on the host (a scalar for scalar values).
  template <class V>
  auto reduce(ReduceOp op, const V& value, std::optional<int> axis);
  template <class V>
  auto reduce(std::string_view op, const V& value, std::optional<int> axis) {
    return reduce(parse_reduce_op(op), value, axis);
  }

  // Concatenates the replicas' components along `axis` on the host.
  Tensor gather(const DistributedValues<Tensor>& value, int axis);

  template <class T>
  std::vector<T> experimental_local_results(const DistributedValues<T>& value) const {
    return value.values();
  }
  // A value that is not distributed is its own only local result.
  template <class T>
    requires(!Distributed<T>)
  std::vector<T> experimental_local_results(const T& value) const {
    return {value};
  }
  // A variable's components, in replica order (defined in distribute/variables/variable.h).
  inline std::vector<Tensor> experimental_local_results(const Variable& variable) const;

  // For the objects made for this strategy (variables, optimizers): see detail::StrategyIdentity.
  const std::shared_ptr<detail::StrategyIdentity>& identity() const { return identity_; }

  // Calls value_fn(ValueContext(i, n)) for each replica i of this worker (i global, n replicas in
  // sync) and returns the results as PerReplica.
  template <class Fn>
  auto experimental_distribute_values_from_function(Fn&& value_fn);

  // Distributed input (input/distributed_dataset.h): each element of `dataset`, a global batch, is
  // split between the replicas (of every worker: this worker's replicas get their rows), prepared
  // ahead on a background thread while the steps run:
  //   for (auto batch : strategy.experimental_distribute_dataset(ds)) strategy.run(step, batch);
  // Both this and distribute_datasets_from_function belong to cross-replica or default context:
  // inside a replica's function they throw FailedPreconditionError at the call.
  template <class T>
  DistributedDataset<T> experimental_distribute_dataset(const data::Dataset<T>& dataset,
                                                        const InputOptions& options = {}) const {
    detail::require_cross_replica_or_default(*this, "experimental_distribute_dataset", kDistributeInputHint);
    return DistributedDataset<T>::from_dataset(extended_->worker_devices(), dataset, options,
                                               extended_->input_context(), extended_->input_agreement());
  }
  // Calls dataset_fn(extended().input_context()) once for this process's input pipeline (a worker
  // shards its input by input_pipeline_id()); the replicas of
  // each step take consecutive elements (per-replica batches) of the data::Dataset it returns.
  // With options.experimental_replication_mode = InputReplicationMode::kPerReplica, dataset_fn is
  // called once per replica of this worker instead, with input_pipeline_id() = the replica's
  // global id, and each replica takes the elements of its own dataset.
  template <class Fn>
  auto distribute_datasets_from_function(Fn&& dataset_fn, const InputOptions& options = {}) const {
    using Returned = std::decay_t<std::invoke_result_t<Fn&, const InputContext&>>;
    detail::require_cross_replica_or_default(*this, "distribute_datasets_from_function", kDistributeInputHint);
    return DistributedDataset<typename Returned::element_type>::from_function(
        extended_->worker_devices(), std::forward<Fn>(dataset_fn), options, extended_->input_context(),
        extended_->input_agreement());
  }

 protected:
  Strategy() = default;
  // Called once by the concrete strategy's constructor.
  void set_extended(std::unique_ptr<StrategyExtended> extended);
  // An elastic strategy's engine for its new workers, between runs: the old one is released
  // first (its replicas and transport gone), then the new one set; the strategy stays the same one
  // to the variables and optimizers made for it (its identity), with the new replicas.
  void release_extended() { extended_.reset(); }
  void replace_extended(std::unique_ptr<StrategyExtended> extended);

 private:
  template <class Arg>
  void check_distributed_argument(const Arg& arg, std::size_t index) const;
  // Throws InvalidArgumentError unless a distributed value has one value per replica.
  void check_replica_count(int num_values, const char* method) const;
  Tensor reduce_non_distributed(ReduceOp op, const Tensor& value, std::optional<int> axis);

  static constexpr const char* kDistributeInputHint =
      "distribute the dataset outside Strategy::run and pass each step's PerReplica batch to run";

  std::unique_ptr<StrategyExtended> extended_;
  std::shared_ptr<detail::StrategyIdentity> identity_;
};

// RAII guard returned by Strategy::scope(). Destroy scopes in reverse order of creation, on the
// thread that created them; a scope may be moved on any thread meanwhile.
//
// The scope is the entering thread's context, which no other thread can leave for it. Destroyed
// on another thread, the destructor throws FailedPreconditionError and the entering thread stays
// in the scope; hence noexcept(false). It never throws while an exception is propagating on the
// destroying thread (std::uncaught_exceptions() > 0): then it does nothing. Keep a scope in a
// local or a member, destroyed by its own thread; a holder whose destruction is noexcept
// (std::optional::reset, std::unique_ptr) turns that error into std::terminate.
class StrategyScope {
 public:
  StrategyScope(StrategyScope&& other) noexcept;
  StrategyScope& operator=(StrategyScope&&) = delete;
  ~StrategyScope() noexcept(false);
  Strategy& strategy() const { return *strategy_; }

 private:
  friend class Strategy;
  explicit StrategyScope(Strategy& strategy);
  Strategy* strategy_;
  // The thread that entered the scope. Its address is the key of the scope's entry on that
  // thread's context stack, so the key moves with the scope from whatever thread moves it. Null
  // once moved from.
  std::unique_ptr<const std::thread::id> thread_;
};

// ---------------------------------------------------------------------------------------------
// Implementation of the templates.

namespace detail {

// The argument fn receives on `replica`: the component of a distributed value, else the value.
template <class Arg>
decltype(auto) component(Arg& arg, int replica) {
  if constexpr (Distributed<Arg>) {
    return arg[replica];
  } else {
    return (arg);
  }
}

}  // namespace detail

template <class Arg>
void Strategy::check_distributed_argument(const Arg& arg, std::size_t index) const {
  if constexpr (Distributed<Arg>) {
    DISTRIBUTE_CHECK(arg.num_replicas() == extended_->num_local_replicas(), InvalidArgumentError, "run: argument ",
                     index, " holds values for ", arg.num_replicas(), " replicas but ", name(), " has ",
                     extended_->num_local_replicas(), extended_->in_multi_worker_mode() ? " on this worker" : "",
                     "; create it with this strategy");
  }
}

template <class Fn, class... Args>
auto Strategy::run(Fn&& fn, Args&&... args) {
  using R = std::invoke_result_t<Fn&, decltype(detail::component(args, 0))...>;
  detail::require_cross_replica_or_default(*this, "run",
                                           "a replica cannot start another run; call run from outside");
  std::size_t index = 0;
  (check_distributed_argument(args, index++), ...);
  if constexpr (std::is_void_v<R>) {
    extended_->call_for_each_replica([&](ReplicaContext& ctx) {
      std::invoke(fn, detail::component(args, ctx.local_replica_id())...);
    });
  } else {
    using Value = std::decay_t<R>;
    std::vector<std::optional<Value>> results(static_cast<std::size_t>(extended_->num_local_replicas()));
    extended_->call_for_each_replica([&](ReplicaContext& ctx) {
      const int id = ctx.local_replica_id();
      results[static_cast<std::size_t>(id)].emplace(std::invoke(fn, detail::component(args, id)...));
    });
    std::vector<Value> values;
    values.reserve(results.size());
    for (std::optional<Value>& r : results) values.push_back(std::move(*r));
    return PerReplica<Value>(std::move(values));
  }
}

template <class V>
auto Strategy::reduce(ReduceOp op, const V& value, std::optional<int> axis) {
  detail::require_cross_replica_or_default(*this, "reduce", nullptr);
  if constexpr (Distributed<V>) {
    check_replica_count(value.num_replicas(), "Strategy::reduce");
    using T = typename V::value_type;
    if constexpr (std::same_as<T, Tensor>) {
      return extended_->reduce_components(op, value.values(), axis, Device::cpu(), {}, "Strategy::reduce");
    } else {
      static_assert(nest::ScalarLeaf<T>, "Strategy::reduce takes distributed Tensors or arithmetic scalars");
      std::vector<Tensor> tensors;
      tensors.reserve(value.values().size());
      for (const T& v : value.values()) tensors.push_back(Tensor::scalar<T>(v));
      return extended_->reduce_components(op, tensors, axis, Device::cpu(), {}, "Strategy::reduce").template item<T>();
    }
  } else if constexpr (std::same_as<V, Tensor>) {
    return reduce_non_distributed(op, value, axis);
  } else {
    static_assert(nest::ScalarLeaf<V>, "Strategy::reduce takes distributed Tensors or arithmetic scalars");
    return reduce_non_distributed(op, Tensor::scalar<V>(value), axis).template item<V>();
  }
}

template <class Fn>
auto Strategy::experimental_distribute_values_from_function(Fn&& value_fn) {
  using R = std::decay_t<std::invoke_result_t<Fn&, const ValueContext&>>;
  std::vector<R> values;
  const int local = extended_->num_local_replicas();
  values.reserve(static_cast<std::size_t>(local));
  for (int i = 0; i < local; ++i) {
    values.push_back(value_fn(ValueContext(extended_->worker_id() * local + i, num_replicas_in_sync())));
  }
  return PerReplica<R>(std::move(values));
}

}  // namespace distribute
