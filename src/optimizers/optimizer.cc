// Optimizer: the checks, the batched all_reduce and the slots every optimizer shares.
#include "distribute/optimizers/optimizer.h"

#include <cmath>
#include <deque>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/timeline.h"
#include "distribute/replica/replica_context.h"
#include "distribute/strategy/context.h"
#include "device/gpu_runtime.h"
#include "optimizers/slot.h"

namespace distribute::optimizers {
namespace {

bool in_replica_fn() { return get_replica_context() != nullptr && has_strategy(); }

// The strategy an optimizer made now is for. Not inside a replica's function: each replica would
// make an optimizer of its own.
const std::shared_ptr<distribute::detail::StrategyIdentity>& strategy_for_new_optimizer(const std::string& name) {
  DISTRIBUTE_CHECK(!in_replica_fn(), FailedPreconditionError, name,
                   ": created inside a replica's fn; create the optimizer under strategy.scope(), outside "
                   "Strategy::run, and use it in every replica");
  return get_strategy().identity();
}

// A NaN or infinite rate writes NaN into every weight at the next step; a negative one climbs.
double checked_learning_rate(double learning_rate, const std::string& method) {
  DISTRIBUTE_CHECK(std::isfinite(learning_rate) && learning_rate >= 0.0, InvalidArgumentError, method,
                   ": learning_rate is ", learning_rate, "; it must be >= 0 and finite");
  return learning_rate;
}

std::vector<Variable> variables_of(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) {
  std::vector<Variable> variables;
  variables.reserve(grads_and_vars.size());
  for (const auto& [gradient, variable] : grads_and_vars) variables.push_back(variable);
  return variables;
}

// Where the gradients are applied: a replica's device, or, in cross-replica context, the host,
// whose memory every CPU device names.
struct GradientPlace {
  Device device;
  bool any_cpu_device = false;
};

// The gradients of `grads_and_vars`, each copied to `place` unless it is there already.
std::vector<Tensor> gradients_at(const GradientPlace& place,
                                 const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) {
  std::vector<Tensor> gradients;
  gradients.reserve(grads_and_vars.size());
  for (const auto& [gradient, variable] : grads_and_vars) {
    const bool there = place.any_cpu_device ? gradient.device().is_cpu() : gradient.device() == place.device;
    gradients.push_back(there ? gradient : gradient.to(place.device));
  }
  return gradients;
}

}  // namespace

Tensor Optimizer::shard_view(const Tensor& whole, const Part& part) {
  const Shard shard = shard_of(whole.num_elements(), part.replicas, part.replica);
  return whole.reshape(Shape{whole.num_elements()}).slice(shard.begin, shard.begin + shard.size);
}

// Each variable's slots, in the order they were created.
struct Optimizer::SlotTable {
  struct Entry {
    Variable variable;
    std::vector<std::unique_ptr<detail::Slot>> slots;  // slot_names_ order
  };
  std::vector<Entry> entries;
  absl::flat_hash_map<Variable, std::size_t> index;  // into entries

  const Entry* find(const Variable& variable) const {
    auto it = index.find(variable);
    return it == index.end() ? nullptr : &entries[it->second];
  }
};

Optimizer::Optimizer(std::string name, double learning_rate, std::vector<std::string> slot_names,
                     const OptimizerOptions& options)
    : strategy_(strategy_for_new_optimizer(name)),
      name_(std::move(name)),
      apply_action_(name_ + ".apply_gradients"),
      learning_rate_(checked_learning_rate(learning_rate, name_)),
      slot_names_(std::move(slot_names)),
      shard_state_(options.shard_state),
      iterations_(std::int64_t{0}, VariableOptions{.name = name_ + "/iterations",
                                                   .trainable = false,
                                                   .aggregation = VariableAggregation::kOnlyFirstReplica}),
      slots_(std::make_shared<SlotTable>()) {}

Optimizer::~Optimizer() = default;

void Optimizer::set_learning_rate(double learning_rate) {
  DISTRIBUTE_CHECK(!in_replica_fn(), FailedPreconditionError, name_,
                   ".set_learning_rate: called inside a replica's fn, where the replicas read it; set it between "
                   "Strategy::run calls");
  learning_rate_ = checked_learning_rate(learning_rate, absl::StrCat(name_, ".set_learning_rate"));
}

void Optimizer::build(const std::vector<Variable>& variables) {
  DISTRIBUTE_CHECK(!in_replica_fn(), FailedPreconditionError, name_,
                   ".build: called inside a replica's fn; build the optimizer under strategy.scope(), outside "
                   "Strategy::run (apply_gradients creates missing slots by itself)");
  for (std::size_t k = 0; k < variables.size(); ++k) check_variable(variables[k], k, "build");
  create_slots(variables);
}

void Optimizer::require_unsharded(const char* method) const {
  DISTRIBUTE_CHECK(!shard_state_, UnimplementedError, name_, ".", method,
                   ": the slots are kept in shards across the replicas (OptimizerOptions::shard_state), not as "
                   "variables; checkpoint them through checkpoint_state()");
}

std::vector<std::pair<std::string, Saveable>> Optimizer::checkpoint_state() const {
  DISTRIBUTE_CHECK(slot_names_.empty() || !slots_->entries.empty(), FailedPreconditionError, name_,
                   ".checkpoint_state: the optimizer has no slots yet (", absl::StrJoin(slot_names_, ", "),
                   "), so a checkpoint of this state would lack them; call build(variables) with the variables it "
                   "trains first");
  // The list of entries is fixed now, and a checkpoint of it would save and restore without the
  // slots made later: its step count, read and written at every save and restore, says so.
  const std::shared_ptr<const SlotTable> table = slots_;
  const std::size_t taken = table->entries.size();
  const auto require_no_later_slots = [table, taken, name = name_] {
    if (table->entries.size() == taken) return;
    std::vector<std::string> later;
    for (std::size_t k = taken; k < table->entries.size(); ++k) {
      later.push_back(absl::StrCat("'", table->entries[k].variable.name(), "'"));
    }
    throw FailedPreconditionError(absl::StrCat(
        name, ".checkpoint_state: slots were made for ", absl::StrJoin(later, ", "),
        " after this state was taken, so a checkpoint of it would lack them; take checkpoint_state() again (after "
        "build(variables) with every variable the optimizer trains)"));
  };
  std::vector<std::pair<std::string, Saveable>> out;
  out.emplace_back(iterations_.name(),
                   Saveable(
                       iterations_.dtype(), iterations_.shape(),
                       [require_no_later_slots, iterations = iterations_] {
                         require_no_later_slots();
                         return iterations.value();
                       },
                       [require_no_later_slots, iterations = iterations_](const Tensor& value) mutable {
                         require_no_later_slots();
                         iterations.assign(value);
                       }));
  for (const SlotTable::Entry& entry : slots_->entries) {
    for (const std::unique_ptr<detail::Slot>& slot : entry.slots) out.emplace_back(slot->name(), slot->saveable());
  }
  return out;
}

Variable Optimizer::get_slot(const Variable& variable, std::string_view slot_name) const {
  require_unsharded("get_slot");
  DISTRIBUTE_CHECK(variable.defined(), InvalidArgumentError, name_, ".get_slot: the variable is undefined");
  const SlotTable::Entry* entry = slots_->find(variable);
  DISTRIBUTE_CHECK(entry != nullptr, InvalidArgumentError, name_, ".get_slot: variable '", variable.name(),
                   "' has no slots yet; apply_gradients or build creates them");
  for (std::size_t i = 0; i < slot_names_.size(); ++i) {
    if (slot_names_[i] == slot_name) return *entry->slots[i]->variable();
  }
  const std::string known = slot_names_.empty() ? std::string("none") : absl::StrJoin(slot_names_, ", ");
  throw InvalidArgumentError(
      absl::StrCat(name_, ".get_slot: no slot named '", std::string(slot_name), "'; its slots: ", known));
}

std::vector<Variable> Optimizer::variables() const {
  require_unsharded("variables");
  std::vector<Variable> out{iterations_};
  for (const SlotTable::Entry& e : slots_->entries) {
    for (const std::unique_ptr<detail::Slot>& slot : e.slots) out.push_back(*slot->variable());
  }
  return out;
}

void Optimizer::check_variable(const Variable& var, std::size_t k, const char* method) const {
  DISTRIBUTE_CHECK(var.defined(), InvalidArgumentError, name_, ".", method, ": variable ", k,
                   " of the list is undefined (default-constructed)");
  DISTRIBUTE_CHECK(distribute::detail::created_for(var, strategy_->get(name_)), InvalidArgumentError, name_, ".", method,
                   ": variable '", var.name(), "' was created for ", var.distribute_strategy().name(),
                   " but the optimizer for ", strategy_->name(),
                   "; create the optimizer under the scope of the variables' strategy");
  DISTRIBUTE_CHECK(var.synchronization() != VariableSynchronization::kOnRead, InvalidArgumentError, name_, ".",
                   method, ": variable '", var.name(),
                   "' is synchronized ON_READ; optimizers update ON_WRITE (mirrored) variables");
  DISTRIBUTE_CHECK(var.trainable(), InvalidArgumentError, name_, ".", method, ": variable '", var.name(),
                   "' is not trainable");
  DISTRIBUTE_CHECK(var.dtype() == DType::kFloat32 || var.dtype() == DType::kFloat64, InvalidArgumentError, name_,
                   ".", method, ": variable '", var.name(), "' has dtype ", dtype_name(var.dtype()),
                   "; optimizers update float32 and float64 variables");
}

void Optimizer::check(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) const {
  DISTRIBUTE_CHECK(!grads_and_vars.empty(), InvalidArgumentError, name_,
                   ".apply_gradients: no (gradient, variable) pairs were given");
  absl::flat_hash_map<Variable, std::size_t> seen;
  for (std::size_t k = 0; k < grads_and_vars.size(); ++k) {
    const auto& [gradient, var] = grads_and_vars[k];
    check_variable(var, k, "apply_gradients");
    DISTRIBUTE_CHECK(gradient.defined(), InvalidArgumentError, name_, ".apply_gradients: the gradient of variable '",
                     var.name(), "' is an undefined Tensor");
    DISTRIBUTE_CHECK(gradient.dtype() == var.dtype(), InvalidArgumentError, name_,
                     ".apply_gradients: the gradient of variable '", var.name(), "' has dtype ",
                     dtype_name(gradient.dtype()), " but the variable has dtype ", dtype_name(var.dtype()));
    DISTRIBUTE_CHECK(gradient.shape() == var.shape(), InvalidArgumentError, name_,
                     ".apply_gradients: the gradient of variable '", var.name(), "' has shape ",
                     gradient.shape().to_string(), " but the variable has shape ", var.shape().to_string());
    const auto [it, inserted] = seen.emplace(var, k);
    DISTRIBUTE_CHECK(inserted, InvalidArgumentError, name_, ".apply_gradients: variable '", var.name(),
                     "' is listed twice (at ", it->second, " and ", k, ")");
  }
}

bool Optimizer::has_slots_for(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) const {
  for (const auto& [gradient, variable] : grads_and_vars) {
    if (!slots_->index.contains(variable)) return false;
  }
  return true;
}

void Optimizer::create_slots(const std::vector<Variable>& variables) {
  // Slots are variables of the optimizer's strategy whatever the context: apply_gradients may be
  // called outside its scope.
  Strategy& strategy = strategy_->get(name_);
  std::optional<StrategyScope> scope;
  if (&get_strategy() != &strategy) scope.emplace(strategy.scope());
  for (const Variable& variable : variables) {
    if (slots_->index.contains(variable)) continue;
    SlotTable::Entry entry{variable, {}};
    for (const std::string& slot : slot_names_) {
      std::string name = absl::StrCat(name_, "/", variable.name(), "/", slot);
      entry.slots.push_back(shard_state_ ? detail::make_sharded_slot(std::move(name), variable, strategy, strategy_, name_)
                                         : detail::make_whole_slot(std::move(name), variable));
    }
    slots_->index.emplace(variable, slots_->entries.size());
    slots_->entries.push_back(std::move(entry));
  }
}

void Optimizer::apply_gradients(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                                const ApplyOptions& options) {
  ReplicaContext* ctx = get_replica_context();
  if (ctx == nullptr || !has_strategy()) {
    const distribute::detail::timeline::Span span(distribute::detail::timeline::kProgramTrack, "apply_gradients");
    apply_in_cross_replica_context(grads_and_vars);
  } else {
    const distribute::detail::timeline::Span span(ctx->replica_id_in_sync_group(), "apply_gradients");
    apply_in_replica(*ctx, grads_and_vars, options);
  }
}

void Optimizer::apply_in_cross_replica_context(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) {
  check(grads_and_vars);
  if (shard_state_) {
    // Each replica's shard of the state is its own to update: the given gradients are applied as
    // the sums they are, by the replicas.
    strategy_->get(name_).run([&] {
      apply_in_replica(*get_replica_context(), grads_and_vars, ApplyOptions{.skip_gradients_aggregation = true});
    });
    return;
  }
  if (!has_slots_for(grads_and_vars)) create_slots(variables_of(grads_and_vars));
  const std::vector<Tensor> gradients = gradients_at({Device::cpu(), true}, grads_and_vars);
  for (int i = 0; i < iterations_.num_components(); ++i) update_component(gradients, grads_and_vars, i, Part{});
}

void Optimizer::require_strategy_of(const ReplicaContext& ctx, const char* method) const {
  strategy_->get(name_);
  DISTRIBUTE_CHECK(ctx.strategy().identity()->id() == strategy_->id(), FailedPreconditionError, name_, ".", method,
                   ": called in a replica of ", ctx.strategy().name(), " but the optimizer was created for ",
                   strategy_->name(), "; create the optimizer under the scope of the strategy that runs the step");
}

void Optimizer::ensure_slots_in_replica(ReplicaContext& ctx,
                                        const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                                        const distribute::detail::CallPurpose& purpose) {
  if (has_slots_for(grads_and_vars)) return;
  distribute::detail::ScopedCallPurpose issued_for(ctx, purpose);
  ctx.merge_call(
      [](Strategy&, const PerReplica<Optimizer*>& optimizers,
         const PerReplica<const std::vector<std::pair<Tensor, Variable>>*>& lists) {
        for (int r = 1; r < optimizers.num_replicas(); ++r) {
          DISTRIBUTE_CHECK(optimizers[r] == optimizers[0], InvalidArgumentError, optimizers[0]->name_,
                           ".apply_gradients: replica ", r, " called it on another optimizer than replica 0; "
                           "create one optimizer under strategy.scope() and use it in every replica");
        }
        optimizers[0]->create_slots(variables_of(*lists[0]));
      },
      this, &grads_and_vars);
}

void Optimizer::apply_in_replica(ReplicaContext& ctx, const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                                 const ApplyOptions& options) {
  require_strategy_of(ctx, "apply_gradients");
  check(grads_and_vars);
  // The collectives below name the variables, in order, in their signature: replicas (or
  // workers) listing other variables or another order fail instead of applying one variable's
  // gradient to another.
  absl::InlinedVector<distribute::detail::VariableKey, 16> keys;
  for (const auto& [gradient, variable] : grads_and_vars) keys.push_back(distribute::detail::variable_key(variable));
  const distribute::detail::CallPurpose purpose(apply_action_.c_str(), keys);
  ensure_slots_in_replica(ctx, grads_and_vars, purpose);
  std::vector<Tensor> gradients = gradients_at({ctx.device()}, grads_and_vars);
  if (shard_state_) {
    apply_sharded_in_replica(ctx, grads_and_vars, gradients, purpose, options.skip_gradients_aggregation);
    return;
  }
  if (!options.skip_gradients_aggregation) {
    distribute::detail::ScopedCallPurpose issued_for(ctx, purpose);
    gradients = ctx.all_reduce(ReduceOp::kSum, gradients);
  }
  update_component(gradients, grads_and_vars, ctx.local_replica_id(), Part{});
}

void Optimizer::apply_sharded_in_replica(ReplicaContext& ctx,
                                         const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                                         const std::vector<Tensor>& gradients, const distribute::detail::CallPurpose& purpose,
                                         bool summed) {
  const Part part{ctx.replica_id_in_sync_group(), ctx.num_replicas_in_sync()};
  std::vector<Tensor> shards;
  if (summed) {
    shards.reserve(gradients.size());
    for (const Tensor& gradient : gradients) shards.push_back(shard_view(gradient, part));
  } else {
    distribute::detail::ScopedCallPurpose issued_for(ctx, purpose);
    shards = ctx.reduce_scatter(ReduceOp::kSum, gradients);
  }
  apply_shards_in_replica(ctx, grads_and_vars, shards, purpose);
}

void Optimizer::apply_shards_in_replica(ReplicaContext& ctx,
                                        const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                                        const std::vector<Tensor>& shards, const distribute::detail::CallPurpose& purpose) {
  const Part part{ctx.replica_id_in_sync_group(), ctx.num_replicas_in_sync()};
  const int component = ctx.local_replica_id();
  update_component(shards, grads_and_vars, component, part);
  // Every replica's updated shard goes straight into every replica's component.
  std::vector<Tensor> components;
  components.reserve(grads_and_vars.size());
  for (const auto& [gradient, variable] : grads_and_vars) components.push_back(variable.component(component));
  distribute::detail::ScopedCallPurpose issued_for(ctx, purpose);
  ctx.all_gather_shards_in_place(components);
}

// A step's gradients in buckets: the open one (the last) fills, the others are summing.
struct GradientBuckets::State {
  struct Bucket {
    std::vector<Tensor> gradients;
    std::vector<Variable> variables;
    std::int64_t bytes = 0;
    CollectiveHandle<std::vector<Tensor>> summed;  // set when the bucket starts
  };
  Optimizer* optimizer = nullptr;
  ReplicaContext* context = nullptr;
  std::int64_t bucket_bytes = 0;
  CommunicationOptions communication;
  std::deque<Bucket> buckets{1};
  absl::flat_hash_set<Variable> added;
  bool applied = false;

  void require_usable(const char* method) const {
    DISTRIBUTE_CHECK(!applied, FailedPreconditionError, "GradientBuckets::", method,
                     ": the buckets were applied already; make new ones with gradient_buckets() for the next step");
    DISTRIBUTE_CHECK(get_replica_context() == context, FailedPreconditionError, "GradientBuckets::", method,
                     ": called outside the replica's fn that made the buckets (replica ",
                     context->replica_id_in_sync_group(), ")");
  }

  // Starts the open bucket's collective, naming its variables in its signature, and opens
  // another.
  void start_open_bucket() {
    Bucket& open = buckets.back();
    if (open.variables.empty()) return;
    std::vector<distribute::detail::VariableKey> keys;
    keys.reserve(open.variables.size());
    for (const Variable& v : open.variables) keys.push_back(distribute::detail::variable_key(v));
    const distribute::detail::CallPurpose purpose(optimizer->apply_action_.c_str(), keys);
    distribute::detail::ScopedCallPurpose issued_for(*context, purpose);
    open.summed = optimizer->shard_state_
                      ? context->reduce_scatter_async(ReduceOp::kSum, open.gradients, communication)
                      : context->all_reduce_async(ReduceOp::kSum, open.gradients, communication);
    open.gradients.clear();  // the collective holds them
    buckets.emplace_back();
  }
};

GradientBuckets::GradientBuckets(std::unique_ptr<State> state) : state_(std::move(state)) {}
GradientBuckets::GradientBuckets(GradientBuckets&&) noexcept = default;
GradientBuckets& GradientBuckets::operator=(GradientBuckets&&) noexcept = default;
GradientBuckets::~GradientBuckets() = default;

void GradientBuckets::add(const Variable& variable, const Tensor& gradient) {
  DISTRIBUTE_CHECK(state_ != nullptr, FailedPreconditionError, "GradientBuckets::add: the buckets were moved from");
  State& s = *state_;
  s.require_usable("add");
  const Optimizer& optimizer = *s.optimizer;
  const std::size_t index = s.added.size();
  optimizer.check_variable(variable, index, "GradientBuckets::add");
  const std::string& name = optimizer.name();
  DISTRIBUTE_CHECK(gradient.defined(), InvalidArgumentError, name, ".GradientBuckets::add: the gradient of variable '",
                   variable.name(), "' is an undefined Tensor");
  DISTRIBUTE_CHECK(gradient.dtype() == variable.dtype(), InvalidArgumentError, name,
                   ".GradientBuckets::add: the gradient of variable '", variable.name(), "' has dtype ",
                   dtype_name(gradient.dtype()), " but the variable has dtype ", dtype_name(variable.dtype()));
  DISTRIBUTE_CHECK(gradient.shape() == variable.shape(), InvalidArgumentError, name,
                   ".GradientBuckets::add: the gradient of variable '", variable.name(), "' has shape ",
                   gradient.shape().to_string(), " but the variable has shape ", variable.shape().to_string());
  DISTRIBUTE_CHECK(s.added.insert(variable).second, InvalidArgumentError, name,
                   ".GradientBuckets::add: variable '", variable.name(), "' was added twice in this step");
  State::Bucket& open = s.buckets.back();
  const Device& device = s.context->device();
  open.gradients.push_back(gradient.device() == device ? gradient : gradient.to(device));
  open.variables.push_back(variable);
  open.bytes += static_cast<std::int64_t>(gradient.nbytes());
  if (open.bytes >= s.bucket_bytes) s.start_open_bucket();
}

GradientBuckets Optimizer::gradient_buckets(const BucketOptions& options) {
  ReplicaContext* ctx = get_replica_context();
  DISTRIBUTE_CHECK(in_replica_fn(), FailedPreconditionError, name_,
                   ".gradient_buckets: called outside a replica's fn; buckets hold one replica's gradients of one "
                   "step (outside a run, pass the summed gradients to apply_gradients)");
  require_strategy_of(*ctx, "gradient_buckets");
  DISTRIBUTE_CHECK(options.bucket_bytes >= 1, InvalidArgumentError, name_, ".gradient_buckets: bucket_bytes is ",
                   options.bucket_bytes, "; it must be at least 1");
  auto state = std::make_unique<GradientBuckets::State>();
  state->optimizer = this;
  state->context = ctx;
  state->bucket_bytes = options.bucket_bytes;
  state->communication = options.communication;
  return GradientBuckets(std::move(state));
}

void Optimizer::apply_gradients(GradientBuckets& buckets) {
  DISTRIBUTE_CHECK(buckets.state_ != nullptr, FailedPreconditionError, name_,
                   ".apply_gradients: the buckets were moved from");
  GradientBuckets::State& s = *buckets.state_;
  DISTRIBUTE_CHECK(s.optimizer == this, InvalidArgumentError, name_,
                   ".apply_gradients: the buckets were made by optimizer ", s.optimizer->name(),
                   "; apply them with the optimizer that made them");
  s.require_usable("apply_gradients");
  DISTRIBUTE_CHECK(!s.added.empty(), InvalidArgumentError, name_,
                   ".apply_gradients: no gradient was added to the buckets");
  s.start_open_bucket();
  s.applied = true;
  ReplicaContext& ctx = *s.context;
  const distribute::detail::timeline::Span span(ctx.replica_id_in_sync_group(), "apply_gradients");
  // The pairs in the order they were added: each bucket's sums (or this replica's shards of them).
  std::vector<std::pair<Tensor, Variable>> summed;
  summed.reserve(s.added.size());
  for (GradientBuckets::State::Bucket& bucket : s.buckets) {
    if (bucket.variables.empty()) continue;
    const std::vector<Tensor>& sums = bucket.summed.wait();
    for (std::size_t k = 0; k < sums.size(); ++k) summed.emplace_back(sums[k], bucket.variables[k]);
  }
  // The step's remaining collectives (the slots' creation, the shards' all_gather) name every
  // variable, in order.
  std::vector<distribute::detail::VariableKey> keys;
  keys.reserve(summed.size());
  for (const auto& [gradient, variable] : summed) keys.push_back(distribute::detail::variable_key(variable));
  const distribute::detail::CallPurpose purpose(apply_action_.c_str(), keys);
  ensure_slots_in_replica(ctx, summed, purpose);
  std::vector<Tensor> gradients;
  gradients.reserve(summed.size());
  for (const auto& [gradient, variable] : summed) gradients.push_back(gradient);
  if (shard_state_) {
    apply_shards_in_replica(ctx, summed, gradients, purpose);
    return;
  }
  update_component(gradients, summed, ctx.local_replica_id(), Part{});
}

void Optimizer::update_component(const std::vector<Tensor>& gradients,
                                 const std::vector<std::pair<Tensor, Variable>>& grads_and_vars, int component,
                                 const Part& part) const {
  // The step count lives with the component (iterations_ and the variables, all of one strategy,
  // have their components on the same devices): a GPU's stays on the GPU, where the kernels read
  // it and one more counts the step, all on the replica's stream.
  Tensor counter = iterations_.component(component);
  const bool counter_on_host = counter.device().is_cpu();
  Step step;
  if (counter_on_host) {
    step.number = counter.data<std::int64_t>()[0] + 1;
  } else {
    step.steps_before_on_device = static_cast<const std::int64_t*>(counter.raw_data());
  }
  absl::InlinedVector<Tensor, 2> slots;
  for (std::size_t k = 0; k < grads_and_vars.size(); ++k) {
    const Variable& variable = grads_and_vars[k].second;
    slots.clear();
    const SlotTable::Entry& entry = *slots_->find(variable);
    for (const std::unique_ptr<detail::Slot>& slot : entry.slots) slots.push_back(slot->part(component));
    Tensor target = part.replica < 0 ? variable.component(component) : shard_view(variable.component(component), part);
    const Tensor& gradient = gradients[k];
    update_step(gradient.device() == target.device() ? gradient : gradient.to(target.device()), target,
                std::span<Tensor>(slots.data(), slots.size()), step);
  }
  if (counter_on_host) {
    counter.data<std::int64_t>()[0] = step.number;
  } else {
    distribute::detail::gpu::increment(static_cast<std::int64_t*>(counter.raw_data()), counter.device());
  }
}

}  // namespace distribute::optimizers
