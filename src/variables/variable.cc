// Variables: creation for the strategy in scope, reads and updates in each context, printing.
#include "distribute/variables/variable.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device/gpu_runtime.h"
#include "distribute/device/number_format.h"
#include "distribute/replica/replica_context.h"
#include "distribute/strategy/context.h"
#include "distribute/strategy/strategy.h"
#include "strategy/cross_worker.h"

namespace distribute {

namespace detail {

struct VariableState {
  std::string name;
  DType dtype;
  Shape shape;
  bool trainable;
  VariableSynchronization synchronization;
  VariableAggregation aggregation;
  std::shared_ptr<StrategyIdentity> strategy;
  std::vector<Tensor> components;  // one per worker device of `strategy`, in replica order
  // Names the variable in the signature of the collectives its updates make (key.name points at
  // `name`).
  VariableKey key;

  bool on_read() const { return synchronization == VariableSynchronization::kOnRead; }
  // "Variable 'w'", as messages name it.
  std::string text() const { return absl::StrCat("Variable '", name, "'"); }
  // The strategy, or FailedPreconditionError when it has been destroyed.
  Strategy& live_strategy() const { return strategy->get(text()); }
};

bool created_for(const Variable& variable, const Strategy& strategy) {
  return variable.state("created_for").strategy->id() == strategy.identity()->id();
}

const VariableKey& variable_key(const Variable& variable) { return variable.state("variable_key").key; }

}  // namespace detail

namespace detail {
namespace {

// The component that extended().update is updating on this thread (strategy 0: none).
struct UpdateTarget {
  std::uint64_t strategy = 0;
  int component = -1;
};
thread_local UpdateTarget t_update_target;

}  // namespace

ScopedUpdateContext::ScopedUpdateContext(const Strategy& strategy, int component)
    : saved_strategy_(t_update_target.strategy), saved_component_(t_update_target.component) {
  t_update_target = {strategy.identity()->id(), component};
}

ScopedUpdateContext::~ScopedUpdateContext() { t_update_target = {saved_strategy_, saved_component_}; }

}  // namespace detail

namespace {

using detail::VariableState;

// In extended().update's context on this thread, the component of `s` it acts on; else null.
const Tensor* update_target(const VariableState& s) {
  const detail::UpdateTarget& target = detail::t_update_target;
  if (target.strategy != s.strategy->id()) return nullptr;
  return &s.components[static_cast<std::size_t>(target.component)];
}
using detail::VariableUpdate;

const char* update_name(VariableUpdate op) {
  switch (op) {
    case VariableUpdate::kAssign: return "assign";
    case VariableUpdate::kAdd: return "assign_add";
    case VariableUpdate::kSub: return "assign_sub";
  }
  return "update";
}

// Whether `s` was made outside every strategy's scope: the default strategy's variable, TF's
// plain tf.Variable, with one component.
bool made_outside_strategies(const VariableState& s) { return s.strategy == detail::default_strategy().identity(); }

enum class Access { kRead, kWrite };

// The replica context `method` runs in, or nullptr in cross-replica context (a scope, a merge_fn,
// or no strategy in scope: the default context, where a variable has its cross-replica meaning).
// A variable made outside every strategy is read in another strategy's replicas as it is, as TF
// reads a plain tf.Variable there (nullptr: its cross-replica value, its one component); writing
// it there is refused, since every replica would write that one component.
ReplicaContext* replica_context_for(const VariableState& s, const char* method, Access access) {
  ReplicaContext* ctx = get_replica_context();
  if (ctx == nullptr || !has_strategy()) return nullptr;
  s.live_strategy();
  if (ctx->strategy().identity()->id() == s.strategy->id()) return ctx;
  if (made_outside_strategies(s)) {
    DISTRIBUTE_CHECK(access == Access::kRead, FailedPreconditionError, "Variable '", s.name, "': ", method,
                     " called in a replica of ", ctx->strategy().name(), " but the variable was made outside every "
                     "strategy's scope (for the DefaultStrategy): inside run it can be read, not written, since "
                     "every replica would write its one copy; create it under the scope of the strategy that runs "
                     "the step, or update it outside run");
    return nullptr;
  }
  throw FailedPreconditionError(absl::StrCat("Variable '", s.name, "': ", method, " called in a replica of ",
                                             ctx->strategy().name(), " but the variable was created for ",
                                             s.strategy->name(), "; use a variable created under the scope of the "
                                             "strategy that runs the step"));
}

void check_value(const VariableState& s, const Tensor& value, const char* method) {
  DISTRIBUTE_CHECK(value.defined(), InvalidArgumentError, "Variable '", s.name, "': ", method,
                   " got an undefined Tensor");
  DISTRIBUTE_CHECK(value.dtype() == s.dtype, InvalidArgumentError, "Variable '", s.name, "': ", method,
                   " got a value of dtype ", dtype_name(value.dtype()), " but the variable has dtype ",
                   dtype_name(s.dtype));
  DISTRIBUTE_CHECK(value.shape() == s.shape, InvalidArgumentError, "Variable '", s.name, "': ", method,
                   " got a value of shape ", value.shape().to_string(), " but the variable has shape ",
                   s.shape.to_string());
}

// dst op= src; both of the variable's dtype and shape. A GPU component is updated by the device's
// kernels, ordered on the calling replica's stream (elsewhere on the device's legacy stream).
void apply(Tensor dst, VariableUpdate op, const Tensor& src) {
  if (dst.device().is_gpu()) {
    if (op == VariableUpdate::kAssign) {
      detail::copy_bytes(dst.raw_data(), dst.device(), src.raw_data(), src.device(), dst.nbytes());
      return;
    }
    const Tensor from = src.device() == dst.device() ? src : src.to(dst.device());
    if (op == VariableUpdate::kAdd) {
      const void* const inputs[] = {dst.raw_data(), from.raw_data()};
      detail::gpu::reduce(dst.dtype(), ReduceOp::kSum, inputs, dst.raw_data(), dst.num_elements(), 1, dst.device());
    } else {
      detail::gpu::subtract(dst.dtype(), dst.raw_data(), from.raw_data(), dst.num_elements(), dst.device());
    }
    return;
  }
  dispatch_dtype(dst.dtype(), [&]<class T>(TypeTag<T>) {
    auto out = dst.flat<T>();
    const auto in = src.flat<T>();
    switch (op) {
      case VariableUpdate::kAssign: out = in; break;
      case VariableUpdate::kAdd: out += in; break;
      case VariableUpdate::kSub: out -= in; break;
    }
  });
}

Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

// Every component, in cross-replica context (one thread, no replica running or all of them
// waiting in a merge_call).
void update_cross_replica(const VariableState& s, VariableUpdate op, const Tensor& value, const char* method) {
  const Strategy& strategy = s.live_strategy();
  // Under another strategy's scope, or in its merge_fn, the variable is not this context's.
  const Strategy* context = get_cross_replica_context();
  DISTRIBUTE_CHECK(context == nullptr || made_outside_strategies(s) || context->identity()->id() == s.strategy->id(),
                   FailedPreconditionError,
                   "Variable '", s.name, "': ", method, ": Mixing different distribute::Strategy objects: the variable "
                   "was created for ", s.strategy->name(), " but this thread is in the cross-replica context of ",
                   context->name(), "; update it under its own strategy's scope (or outside every scope)");
  // Every worker's components: the read sums them all.
  const auto n = static_cast<std::int64_t>(strategy.num_replicas_in_sync());
  if (!s.on_read() || s.aggregation != VariableAggregation::kSum || n == 1) {
    for (const Tensor& c : s.components) apply(c, op, value);
    return;
  }
  DISTRIBUTE_CHECK(op == VariableUpdate::kAssign, FailedPreconditionError, "Variable '", s.name, "': ", method,
                   " of an ON_READ variable with aggregation SUM is not supported in cross-replica context (what "
                   "each of its ", n, " components should get is not defined); call it inside the fn passed to "
                   "Strategy::run, or use assign");
  // The read sums the components, so each gets a share of the value.
  if (!is_floating(s.dtype)) {
    const Tensor zeros = Tensor::zeros(s.dtype, s.shape, Device::cpu());
    for (const Tensor& c : s.components) {
      const bool first = c.same_storage(s.components[0]) && s.strategy->worker_id() == 0;
      apply(c, VariableUpdate::kAssign, first ? value : zeros);
    }
    return;
  }
  Tensor share = Tensor::empty(s.dtype, s.shape, Device::cpu());
  dispatch_dtype(s.dtype, [&]<class T>(TypeTag<T>) { share.flat<T>() = value.flat<T>() / static_cast<T>(n); });
  for (const Tensor& c : s.components) apply(c, VariableUpdate::kAssign, share);
}

// An on-write update with aggregation NONE or ONLY_FIRST_REPLICA in replica context: one
// merge_call, whose merge_fn checks that the replicas agree and writes every component.
bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0) return true;
  const Tensor x = on_host(a);
  const Tensor y = on_host(b);
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// The value an ONLY_FIRST_REPLICA or NONE update applies: global replica 0's. With NONE every
// replica must have passed that value; the replicas that did not are gathered from every worker,
// so that each raises the same error.
Tensor first_replica_value(Strategy& strategy, const VariableState& var, VariableUpdate op,
                           const PerReplica<Tensor>& values) {
  const StrategyExtended& extended = strategy.extended();
  const bool across_workers = extended.num_workers() > 1;
  const int local = values.num_replicas();
  const Tensor first = detail::broadcast_from_chief(strategy.extended(), values[0]);
  if (var.aggregation != VariableAggregation::kNone) return first;
  std::vector<int> differing;
  if (across_workers) {
    std::vector<Tensor> flags;
    for (int r = 0; r < local; ++r) {
      flags.push_back(Tensor::from_vector<std::int32_t>({same_bytes(values[r], first) ? 0 : 1}, Shape{1}, Device::cpu()));
    }
    const std::vector<std::int32_t> all =
        strategy.extended().gather_to(PerReplica<Tensor>(std::move(flags)), Device::cpu(), 0).to_vector<std::int32_t>();
    for (std::size_t g = 0; g < all.size(); ++g) {
      if (all[g] != 0) differing.push_back(static_cast<int>(g));
    }
  } else {
    for (int r = 1; r < local; ++r) {
      if (!same_bytes(values[r], first)) differing.push_back(r);
    }
  }
  DISTRIBUTE_CHECK(differing.empty(), InvalidArgumentError, "Variable '", var.name, "': ", update_name(op),
                   " with aggregation NONE in replica context needs the same value on every replica, but ",
                   differing.size() == 1 ? "replica " : "replicas ", absl::StrJoin(differing, ", "),
                   " passed another value than replica 0; give the variable an aggregation (SUM, MEAN, "
                   "ONLY_FIRST_REPLICA) or pass equal values");
  return first;
}

void update_in_merge_call(ReplicaContext& ctx, const VariableState& s, VariableUpdate op, const Tensor& value) {
  ctx.merge_call(
      [](Strategy& strategy, const PerReplica<Tensor>& values, const PerReplica<const VariableState*>& states,
         const PerReplica<VariableUpdate>& ops) {
        // Every replica's call named this variable and update (its CallPurpose): index 0 serves all.
        const VariableState& var = *states[0];
        const Tensor first = first_replica_value(strategy, var, ops[0], values);
        for (const Tensor& c : var.components) apply(c, ops[0], first);
      },
      value, &s, op);
}

// A variable created inside run: every replica calls the constructor, and one merge_call creates
// it for all of them, with global replica 0's initial value (TF's MirroredVariable creation in a
// replica context, which lazily built layers rely on). Its signature names the variable, so
// replicas (or workers) creating different variables at one point fail; the merge_fn checks that
// they agree on everything else.
Variable create_in_replica(ReplicaContext& ctx, const Tensor& initial_value, const VariableOptions& options) {
  const detail::VariableKey key{detail::fixed_hash(options.name), &options.name, 0};
  const detail::CallPurpose purpose("create", std::span(&key, 1));
  detail::ScopedCallPurpose issued_for(ctx, purpose);
  const Tensor local = initial_value.device() == ctx.device() ? initial_value : initial_value.to(ctx.device());
  return ctx.merge_call(
      [](Strategy& strategy, const PerReplica<Tensor>& initials, const PerReplica<const VariableOptions*>& all) {
        const VariableOptions& first = *all[0];
        for (int r = 1; r < initials.num_replicas(); ++r) {
          const VariableOptions& other = *all[r];
          DISTRIBUTE_CHECK(initials[r].dtype() == initials[0].dtype() && initials[r].shape() == initials[0].shape(),
                           InvalidArgumentError, "Variable '", first.name, "': created inside run with an initial "
                           "value of ", dtype_name(initials[0].dtype()), initials[0].shape().compact(), " on replica 0 "
                           "but ", dtype_name(initials[r].dtype()), initials[r].shape().compact(), " on replica ", r,
                           "; every replica must create it with the same dtype and shape");
          DISTRIBUTE_CHECK(other.trainable == first.trainable && other.synchronization == first.synchronization &&
                               other.aggregation == first.aggregation,
                           InvalidArgumentError, "Variable '", first.name, "': created inside run with other options "
                           "on replica ", r, " than on replica 0 (trainable, synchronization or aggregation); every "
                           "replica must create it with the same options");
        }
        return Variable(detail::broadcast_from_chief(strategy.extended(), initials[0]), first);
      },
      local, &options);
}

std::string component_name(const std::string& name, int i) {
  return i == 0 ? absl::StrCat(name, ":0") : absl::StrCat(name, "/replica_", i, ":0");
}

}  // namespace

const char* synchronization_name(VariableSynchronization synchronization) {
  switch (synchronization) {
    case VariableSynchronization::kAuto: return "AUTO";
    case VariableSynchronization::kNone: return "NONE";
    case VariableSynchronization::kOnWrite: return "ON_WRITE";
    case VariableSynchronization::kOnRead: return "ON_READ";
  }
  return "UNKNOWN";
}

const char* aggregation_name(VariableAggregation aggregation) {
  switch (aggregation) {
    case VariableAggregation::kNone: return "NONE";
    case VariableAggregation::kSum: return "SUM";
    case VariableAggregation::kMean: return "MEAN";
    case VariableAggregation::kOnlyFirstReplica: return "ONLY_FIRST_REPLICA";
  }
  return "UNKNOWN";
}

std::ostream& operator<<(std::ostream& os, VariableSynchronization synchronization) {
  return os << synchronization_name(synchronization);
}

std::ostream& operator<<(std::ostream& os, VariableAggregation aggregation) {
  return os << aggregation_name(aggregation);
}

ReduceOp reduce_op_from_variable_aggregation(VariableAggregation aggregation) {
  switch (aggregation) {
    case VariableAggregation::kSum: return ReduceOp::kSum;
    case VariableAggregation::kMean: return ReduceOp::kMean;
    case VariableAggregation::kNone:
    case VariableAggregation::kOnlyFirstReplica:
      throw InvalidArgumentError(absl::StrCat(
          "reduce_op_from_variable_aggregation: aggregation ", aggregation_name(aggregation),
          " has no ReduceOp: its updates combine no values (they take ",
          aggregation == VariableAggregation::kNone ? "the one value every replica passes" : "replica 0's value",
          "); only SUM and MEAN map to a ReduceOp (kSum, kMean)"));
  }
  throw InvalidArgumentError(absl::StrCat("reduce_op_from_variable_aggregation: ", static_cast<int>(aggregation),
                                          " is no VariableAggregation; use SUM or MEAN"));
}

Variable::Variable(const Tensor& initial_value, VariableOptions options) {
  std::string name = options.name.empty() ? "Variable" : std::move(options.name);
  Strategy& strategy = get_strategy();
  DISTRIBUTE_CHECK(static_cast<int>(options.synchronization) >= 0 &&
                       options.synchronization <= VariableSynchronization::kOnRead,
                   InvalidArgumentError, "Variable '", name, "': invalid variable synchronization mode ",
                   static_cast<int>(options.synchronization), "; use AUTO, NONE, ON_WRITE or ON_READ");
  DISTRIBUTE_CHECK(static_cast<int>(options.aggregation) >= 0 &&
                       options.aggregation <= VariableAggregation::kOnlyFirstReplica,
                   InvalidArgumentError, "Variable '", name, "': invalid variable aggregation mode ",
                   static_cast<int>(options.aggregation), "; use NONE, SUM, MEAN or ONLY_FIRST_REPLICA");
  DISTRIBUTE_CHECK(initial_value.defined(), InvalidArgumentError, "Variable '", name,
                   "': the initial value is an undefined Tensor");
  const std::vector<Device>& devices = strategy.extended().worker_devices();
  const VariableSynchronization synchronization = options.synchronization == VariableSynchronization::kAuto
                                                      ? VariableSynchronization::kOnWrite
                                                      : options.synchronization;
  const bool on_read = synchronization == VariableSynchronization::kOnRead;
  DISTRIBUTE_CHECK(synchronization != VariableSynchronization::kNone || devices.size() == 1, InvalidArgumentError,
                   "Variable '", name, "': synchronization NONE is not supported by ", strategy.name(), ", which has ",
                   devices.size(), " replicas; use ON_WRITE (AUTO) or ON_READ");
  DISTRIBUTE_CHECK(!on_read || !options.trainable.value_or(false), InvalidArgumentError, "Variable '", name,
                   "': synchronization ON_READ is only for variables that are not trainable, and trainable is true; "
                   "leave trainable unset (ON_READ variables hold metrics and statistics, not weights)");
  const bool trainable = options.trainable.value_or(!on_read);
  DISTRIBUTE_CHECK(options.aggregation != VariableAggregation::kMean || is_floating(initial_value.dtype()),
                   InvalidArgumentError, "Variable '", name, "': aggregation MEAN needs a floating-point dtype and the "
                   "initial value is ", dtype_name(initial_value.dtype()), "; use SUM or ONLY_FIRST_REPLICA");
  if (ReplicaContext* ctx = get_replica_context(); ctx != nullptr && has_strategy()) {
    options.name = std::move(name);
    *this = create_in_replica(*ctx, initial_value, options);
    return;
  }
  std::vector<Tensor> components;
  components.reserve(devices.size());
  for (const Device& device : devices) components.push_back(initial_value.to(device));
  const std::shared_ptr<detail::StrategyIdentity>& identity = strategy.identity();
  const std::uint64_t number = identity->next_variable_number();
  state_ = std::make_shared<VariableState>(VariableState{std::move(name), initial_value.dtype(), initial_value.shape(),
                                                         trainable, synchronization, options.aggregation, identity,
                                                         std::move(components), {}});
  state_->key = {detail::fixed_hash(state_->name) ^ (number + 1) * 0x9e3779b97f4a7c15, &state_->name, number};
}

const VariableState& Variable::state(const char* method) const {
  DISTRIBUTE_CHECK(state_, FailedPreconditionError, "Variable::", method,
                   ": the variable is undefined (default-constructed); create it with Variable(initial_value)");
  return *state_;
}

const std::string& Variable::name() const { return state("name").name; }
DType Variable::dtype() const { return state("dtype").dtype; }
const Shape& Variable::shape() const { return state("shape").shape; }
bool Variable::trainable() const { return state("trainable").trainable; }
VariableSynchronization Variable::synchronization() const { return state("synchronization").synchronization; }
VariableAggregation Variable::aggregation() const { return state("aggregation").aggregation; }
Strategy& Variable::distribute_strategy() const { return state("distribute_strategy").live_strategy(); }
int Variable::num_components() const { return static_cast<int>(state("num_components").components.size()); }

const Tensor& Variable::component(int i) const {
  const VariableState& s = state("component");
  DISTRIBUTE_CHECK(i >= 0 && i < static_cast<int>(s.components.size()), OutOfRangeError, "Variable '", s.name,
                   "': component ", i, " does not exist; the variable has ", s.components.size(), " components");
  return s.components[static_cast<std::size_t>(i)];
}

Tensor Variable::value() const {
  const VariableState& s = state("value");
  if (const ReplicaContext* ctx = replica_context_for(s, "value", Access::kRead)) {
    return s.components[static_cast<std::size_t>(ctx->local_replica_id())];
  }
  Strategy& strategy = s.live_strategy();
  if (const Tensor* target = update_target(s)) return *target;
  if (!s.on_read() || s.aggregation == VariableAggregation::kOnlyFirstReplica ||
      strategy.num_replicas_in_sync() == 1) {
    return s.components[0];
  }
  DISTRIBUTE_CHECK(s.aggregation != VariableAggregation::kNone, InvalidArgumentError, "Variable '", s.name,
                   "': an ON_READ variable with aggregation NONE cannot be read in cross-replica context, where its ",
                   strategy.num_replicas_in_sync(), " components would have to be combined; read it inside the fn "
                   "passed to Strategy::run, read component(i), or give it an aggregation (SUM, MEAN, "
                   "ONLY_FIRST_REPLICA)");
  // Across every worker's components where the strategy spans several.
  return strategy.extended().reduce_to(reduce_op_from_variable_aggregation(s.aggregation),
                                       DistributedValues<Tensor>(s.components), Device::cpu());
}

Tensor Variable::read_value() const {
  const Tensor v = value();
  // An aggregate is already a tensor of its own.
  for (const Tensor& c : state("read_value").components) {
    if (v.same_storage(c)) return v.clone();
  }
  return v;
}

void Variable::assign(const Tensor& value) { update(VariableUpdate::kAssign, value, "assign"); }
void Variable::assign_add(const Tensor& delta) { update(VariableUpdate::kAdd, delta, "assign_add"); }
void Variable::assign_sub(const Tensor& delta) { update(VariableUpdate::kSub, delta, "assign_sub"); }

void Variable::update(VariableUpdate op, const Tensor& value, const char* method) const {
  const VariableState& s = state(method);
  check_value(s, value, method);
  ReplicaContext* ctx = replica_context_for(s, method, Access::kWrite);
  if (ctx == nullptr) {
    if (const Tensor* target = update_target(s)) {
      apply(*target, op, on_host(value));
      return;
    }
    update_cross_replica(s, op, on_host(value), method);
    return;
  }
  const Tensor local = value.device() == ctx->device() ? value : value.to(ctx->device());
  const Tensor& mine = s.components[static_cast<std::size_t>(ctx->local_replica_id())];
  if (s.on_read()) {
    apply(mine, op, local);
    return;
  }
  // The collective below names this variable and update in its signature: replicas (or workers)
  // updating different variables at one point fail instead of pairing their values.
  const detail::CallPurpose purpose(update_name(op), std::span(&s.key, 1));
  detail::ScopedCallPurpose issued_for(*ctx, purpose);
  switch (s.aggregation) {
    case VariableAggregation::kSum:
    case VariableAggregation::kMean:
      apply(mine, op, ctx->all_reduce(reduce_op_from_variable_aggregation(s.aggregation), local));
      return;
    case VariableAggregation::kNone:
    case VariableAggregation::kOnlyFirstReplica:
      update_in_merge_call(*ctx, s, op, local);
      return;
  }
}

Tensor Variable::convert_scalar(const char* method, double value, DType given) const {
  const VariableState& s = state(method);
  return dispatch_dtype(s.dtype, [&]<class U>(TypeTag<U>) {
    // In range first: converting an out-of-range double to an integer is undefined.
    bool exact = true;
    if constexpr (std::is_integral_v<U>) {
      exact = value >= static_cast<double>(std::numeric_limits<U>::min()) &&
              value <= static_cast<double>(std::numeric_limits<U>::max());
    }
    U converted{};
    if (exact) {
      converted = static_cast<U>(value);
      using Wide = std::conditional_t<std::is_arithmetic_v<U>, U, float>;  // 16-bit floats widen through float
      const double back = static_cast<double>(static_cast<Wide>(converted));
      exact = back == value || (std::isnan(back) && std::isnan(value));
    }
    DISTRIBUTE_CHECK(exact, InvalidArgumentError, "Variable '", s.name, "': ", method, " got the ", dtype_name(given),
                     " value ", format_number(value, given), ", which the variable's dtype ", dtype_name(s.dtype),
                     " cannot hold exactly; pass a ", dtype_name(s.dtype), " value");
    return Tensor::scalar<U>(converted);
  });
}

std::ostream& operator<<(std::ostream& os, const Variable& variable) {
  if (!variable.defined()) return os << "<Variable: undefined>";
  const auto print_component = [&](int i) {
    os << "<Variable '" << component_name(variable.name(), i) << "' shape=" << variable.shape()
       << " dtype=" << variable.dtype() << ", numpy=";
    print_numpy(os, variable.component(i));
    os << '>';
  };
  const int n = variable.num_components();
  if (n == 1) {
    print_component(0);
    return os;
  }
  os << (variable.synchronization() == VariableSynchronization::kOnRead ? "SyncOnReadVariable" : "MirroredVariable")
     << ":{\n";
  for (int i = 0; i < n; ++i) {
    os << "  " << i << ": ";
    print_component(i);
    os << (i + 1 < n ? ",\n" : "\n");
  }
  return os << '}';
}

}  // namespace distribute
