// Variable: the state of a training loop (tf.Variable under tf.distribute). A variable is made for
// the strategy in scope when it is created (get_strategy()) and holds one component per replica
// device of that strategy (extended().worker_devices()): each a copy of the initial value on that
// device. It sits above the strategy layer: strategies forward-declare it, and the templates they
// declare for it (StrategyExtended::update) are defined here.
//
//   MirroredStrategy strategy({"CPU:0", "CPU:1"});
//   Variable w;
//   {
//     StrategyScope scope = strategy.scope();
//     w = Variable(1.0f, {.name = "w", .aggregation = VariableAggregation::kMean});
//   }
//   strategy.run([&] { w.assign_add(get_replica_context()->replica_id_in_sync_group()); });
//   std::cout << w;  // MirroredVariable:{ 0: <Variable 'w:0' ... numpy=1.5>, 1: <... numpy=1.5> }
//
// Synchronization (tf.VariableSynchronization):
//   - ON_WRITE (and AUTO, which is ON_WRITE; a MirroredVariable): the components are kept equal.
//     An update in replica context is collective: every replica makes it, in the same order, and
//     the aggregation says how their values combine: SUM / MEAN all-reduce them (one all_reduce),
//     then each replica writes the result to its own component; ONLY_FIRST_REPLICA takes replica
//     0's value; NONE requires every replica to pass the same value and checks it (TF lets the
//     copies drift apart; a difference here is an InvalidArgumentError naming the replicas). The
//     last two go through one merge_call whose merge_fn writes every component. Misuse (a replica
//     that skips an update or makes another) ends like any collective misuse: a typed error on
//     every replica, never a hang. The collective's signature names the variable and the update
//     (CallPurpose), so replicas or workers that update different variables at one point, or the
//     same ones in another order, get an InvalidArgumentError naming both, whatever the
//     aggregation, instead of combining one variable's values with another's.
//   - ON_READ (a SyncOnReadVariable: metrics, batch-norm statistics): each replica updates only its
//     own component, with no collective; a read in cross-replica context aggregates the
//     components (SUM, MEAN, or component 0 for ONLY_FIRST_REPLICA; with aggregation NONE such a
//     read is an InvalidArgumentError). It is not trainable (trainable unset means false; true is
//     an InvalidArgumentError).
//   - NONE: only for strategies with one replica (as in TF, a multi-replica strategy rejects it);
//     it then behaves as ON_WRITE.
//
// Contexts. In replica context (inside the fn passed to run) value() is the replica's own
// component. In cross-replica context (in scope, in a merge_fn, or with no strategy in scope)
// value() is component 0 of an on-write variable and the aggregate of an on-read one, and an
// update applies to every component; for an on-read SUM variable assign(x) stores x / N in each
// of the N components (integers: x in component 0, zeros elsewhere) so that the read gives x,
// and assign_add / assign_sub are a FailedPreconditionError. A variable is used only in its own
// strategy's replicas, and updated only under its own strategy's scope or under none
// (FailedPreconditionError otherwise), with one exception, as in TF: a variable made outside
// every strategy's scope (the default strategy's, one component) is read in any strategy's
// replicas (value() and read_value() give its one component as it is) and updated under any
// scope, but writing it inside another strategy's run is a FailedPreconditionError naming it and
// that strategy (every replica would write its one copy). Created inside run, it is created once
// for all replicas: every replica must create it (a collective, like an update), with the same
// dtype, shape and options, and its initial value is global replica 0's. Inside
// extended().update(v, fn), a write or read through any variable of the strategy acts on the
// component being updated, as TF's update context routes it. A variable holds its strategy by
// identity, not by address: once the strategy is destroyed, updates, value() and
// distribute_strategy() are a FailedPreconditionError naming the variable, while component(i) and
// printing still show its last values.
//
// Checks, all InvalidArgumentError naming the variable: the options' enums must be in range; an
// update's dtype and shape must be the variable's (a scalar given as a C++ number is converted
// when the variable's dtype holds it exactly, as TF converts Python numbers); MEAN needs a
// floating-point dtype. Components on GPUs are updated by the device's kernels, on the replica's
// stream.
//
// Threading: in replica context replica r writes component r only; every other update happens on
// one thread while no replica runs (cross-replica context) or while all wait in a merge_call.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/device/reduce_op.h"
#include "distribute/device/tensor.h"
#include "distribute/strategy/strategy.h"

namespace distribute {

enum class VariableSynchronization { kAuto, kNone, kOnWrite, kOnRead };  // kAuto = kOnWrite
enum class VariableAggregation { kNone, kSum, kMean, kOnlyFirstReplica };

// As TF spells the enum values: "AUTO", "NONE", "ON_WRITE", "ON_READ"; "NONE", "SUM", "MEAN",
// "ONLY_FIRST_REPLICA".
const char* synchronization_name(VariableSynchronization synchronization);
const char* aggregation_name(VariableAggregation aggregation);
std::ostream& operator<<(std::ostream& os, VariableSynchronization synchronization);
std::ostream& operator<<(std::ostream& os, VariableAggregation aggregation);

// The ReduceOp that combines values as `aggregation` combines the replicas' updates (TF's
// ReduceOp.from_variable_aggregation): SUM -> kSum, MEAN -> kMean. NONE and ONLY_FIRST_REPLICA
// combine nothing (an update takes one value: the one every replica passes, or replica 0's), so
// they have no ReduceOp: InvalidArgumentError, as for a value outside the enum.
ReduceOp reduce_op_from_variable_aggregation(VariableAggregation aggregation);

namespace detail {
struct VariableState;  // what the handles of one variable share (variable.cc)
enum class VariableUpdate { kAssign, kAdd, kSub };
// Whether `variable` was created for `strategy` (by identity: not by address, which a later
// strategy may reuse).
bool created_for(const Variable& variable, const Strategy& strategy);
// How the collectives issued on the variable's behalf name it (CallPurpose).
const VariableKey& variable_key(const Variable& variable);
// extended().update's context (TF's UpdateContext): while it lives, on this thread, writes and
// reads of `strategy`'s variables through the variable itself act on its component `component`,
// the one being updated.
class ScopedUpdateContext {
 public:
  ScopedUpdateContext(const Strategy& strategy, int component);
  ~ScopedUpdateContext();
  ScopedUpdateContext(const ScopedUpdateContext&) = delete;
  ScopedUpdateContext& operator=(const ScopedUpdateContext&) = delete;

 private:
  std::uint64_t saved_strategy_;
  int saved_component_;
};
}  // namespace detail

struct VariableOptions {
  std::string name;  // "" -> "Variable"; printed as 'name:0', 'name/replica_1:0', ...
  // Unset: true, except for ON_READ variables (metrics, statistics), which cannot be trainable.
  std::optional<bool> trainable;
  VariableSynchronization synchronization = VariableSynchronization::kAuto;
  VariableAggregation aggregation = VariableAggregation::kNone;
};

class Variable {
 public:
  // An undefined variable (defined() is false); the other methods throw FailedPreconditionError.
  Variable() = default;
  // Throws FailedPreconditionError inside a replica's fn, InvalidArgumentError for an undefined
  // initial value or options that do not fit (see above).
  explicit Variable(const Tensor& initial_value, VariableOptions options = {});
  // A scalar of T's dtype.
  template <Element T>
  explicit Variable(T initial_value, VariableOptions options = {})
      : Variable(Tensor::scalar<T>(initial_value, Device::cpu()), std::move(options)) {}

  bool defined() const { return static_cast<bool>(state_); }
  const std::string& name() const;
  DType dtype() const;
  const Shape& shape() const;
  bool trainable() const;
  // kOnWrite for a variable created with kAuto.
  VariableSynchronization synchronization() const;
  VariableAggregation aggregation() const;
  // The strategy the variable was created for.
  Strategy& distribute_strategy() const;

  // One per replica device of the strategy it was created for.
  int num_components() const;
  // Replica i's copy (its storage: updates show through). OutOfRangeError unless 0 <= i < N.
  const Tensor& component(int i) const;
  // See "Contexts" above. A component is returned as it is (later updates show through).
  Tensor value() const;
  // value(), as a copy that later updates do not change.
  Tensor read_value() const;

  void assign(const Tensor& value);
  void assign_add(const Tensor& delta);
  void assign_sub(const Tensor& delta);
  template <Element T>
  void assign(T value) {
    assign(scalar_for("assign", value));
  }
  template <Element T>
  void assign_add(T delta) {
    assign_add(scalar_for("assign_add", delta));
  }
  template <Element T>
  void assign_sub(T delta) {
    assign_sub(scalar_for("assign_sub", delta));
  }

  // Identity: copies of one handle are the same variable.
  friend bool operator==(const Variable& a, const Variable& b) { return a.state_ == b.state_; }
  template <class H>
  friend H AbslHashValue(H h, const Variable& v) {
    return H::combine(std::move(h), v.state_.get());
  }

  // What every handle of this variable shares, opaque outside the library (variable.cc), where
  // detail::created_for and detail::variable_key read it. InvalidArgumentError naming `method`
  // for an undefined handle.
  const detail::VariableState& state(const char* method) const;

 private:
  void update(detail::VariableUpdate op, const Tensor& value, const char* method) const;
  // A scalar tensor of the variable's dtype holding `value` (on the replica's device in replica
  // context); InvalidArgumentError when the dtype cannot hold it exactly.
  template <Element T>
  Tensor scalar_for(const char* method, T value) const {
    if (dtype_v<T> == dtype()) return Tensor::scalar<T>(value);
    return convert_scalar(method, static_cast<double>(value), dtype_v<T>);
  }
  Tensor convert_scalar(const char* method, double value, DType given) const;

  std::shared_ptr<detail::VariableState> state_;
};

// Like TF: "<Variable 'w:0' shape=(2,) dtype=float32, numpy=[1.0, 2.0]>" for one component;
// "MirroredVariable:{\n  0: <Variable 'w:0' ...>,\n  1: <Variable 'w/replica_1:0' ...>\n}" (or
// "SyncOnReadVariable:{...}") for several.
std::ostream& operator<<(std::ostream& os, const Variable& variable);

// ---------------------------------------------------------------------------------------------
// Implementation of the templates, and of the strategies' members that take a Variable: declared
// in the strategy layer, which knows Variable by name only, and defined here, above it.

inline std::vector<Tensor> Strategy::experimental_local_results(const Variable& variable) const {
  std::vector<Tensor> components;
  components.reserve(static_cast<std::size_t>(variable.num_components()));
  for (int i = 0; i < variable.num_components(); ++i) components.push_back(variable.component(i));
  return components;
}

inline bool StrategyExtended::variable_created_in_scope(const Variable& v) const {
  return detail::created_for(v, container_strategy());
}

template <class Fn, class... Args>
auto StrategyExtended::update(const Variable& var, Fn&& fn, Args&&... args) {
  require_cross_replica_or_default("extended().update");
  DISTRIBUTE_CHECK(variable_created_in_scope(var), InvalidArgumentError, "extended().update: variable '",
                   var.name(), "' was created for ", var.distribute_strategy().name(), ", not for ",
                   container_strategy().name());
  std::size_t index = 0;
  [[maybe_unused]] auto check_argument = [&](const auto& arg) {
    ++index;
    if constexpr (Distributed<decltype(arg)>) {
      DISTRIBUTE_CHECK(arg.num_replicas() == var.num_components(), InvalidArgumentError,
                       "extended().update: argument ", index, " holds values for ", arg.num_replicas(),
                       " replicas but variable '", var.name(), "' has ", var.num_components(), " components");
    }
  };
  (check_argument(args), ...);
  using R = std::invoke_result_t<Fn&, Tensor&, decltype(detail::component(args, 0))...>;
  const int n = var.num_components();
  if constexpr (std::is_void_v<R>) {
    for (int i = 0; i < n; ++i) {
      Tensor component = var.component(i);
      detail::ScopedUpdateContext updating(container_strategy(), i);
      fn(component, detail::component(args, i)...);
    }
  } else {
    std::vector<std::decay_t<R>> results;
    results.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      Tensor component = var.component(i);
      detail::ScopedUpdateContext updating(container_strategy(), i);
      results.push_back(fn(component, detail::component(args, i)...));
    }
    return Mirrored<std::decay_t<R>>(std::move(results));
  }
}

}  // namespace distribute
