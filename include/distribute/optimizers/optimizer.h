// Optimizer: applies gradients to distributed variables (tf.keras.optimizers.Optimizer under
// tf.distribute). Create it where the variables were created (under the same strategy.scope(), or
// with no scope for the default strategy): its step counter and slot variables (momentum, Adam's
// moments) are variables of that strategy, mirrored like the variables they serve.
//
//   SGD optimizer(0.1, 0.9);                        // under strategy.scope(), beside the variables
//   strategy.run([&](const Tensor& batch) {
//     Tensor grad = ...;                            // of nn::compute_average_loss(...)
//     optimizer.apply_gradients({{grad, w}});
//   }, batches);
//
// apply_gradients in replica context (inside the fn passed to run) is collective: every replica
// calls it, with the same variables in the same order, which is checked on every step (its
// collectives name the variables, in order, in their signature: another set or order on a
// replica or worker is an InvalidArgumentError naming both, never a gradient applied to another
// variable). It sums the replicas' gradients (the loss is
// already divided by the global batch: nn::compute_average_loss) in ONE all_reduce of the whole
// gradient list, then each replica updates its own component of every variable and slot in place,
// with the same arithmetic on the same inputs, so the components stay equal without a second
// collective (with OptimizerOptions::shard_state: a reduce_scatter and an all_gather instead, see
// there). Slot variables missing on that call are first created in one merge_call (the first
// step only; build() creates them up front instead). In cross-replica context (in scope, in a
// merge_fn, or with no strategy in scope) it applies the given gradients to every component.
//
// Checks (InvalidArgumentError naming the variable, before any collective so that a bad call ends
// in an error on every replica, never a hang): every variable defined, trainable, ON_WRITE,
// float32 or float64, created for the optimizer's strategy and listed once; every gradient defined
// and of its variable's dtype and shape. Using the optimizer in a replica of another strategy is a
// FailedPreconditionError.
//
// Threading: apply_gradients may run on every replica thread at once; update_step then runs
// concurrently on different components. build, set_learning_rate and the constructors belong to
// cross-replica context (no replica running).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distribute/collective/communication_options.h"
#include "distribute/collective/shard.h"
#include "distribute/device/tensor.h"
#include "distribute/variables/saveable.h"
#include "distribute/variables/variable.h"

namespace distribute::optimizers {

// What every optimizer can be asked for, beside its own settings.
struct OptimizerOptions {
  // Optimizer state in shards (ZeRO stage 1): each replica keeps only its shard (shard_of, from
  // <distribute/collective/shard.h>, by its replica id) of every slot, and in replica context
  // apply_gradients reduce-scatters the gradients (instead of all-reducing them), updates this
  // replica's shard of every variable and slot, then all-gathers the updated shards into every
  // replica's component. The results are bit for bit those of the unsharded optimizer; each
  // replica holds 1/N of the slots and does 1/N of the update, for one all_gather per step. Slots
  // are then not variables: get_slot and variables() throw UnimplementedError, and
  // checkpoint_state() is what a checkpoint holds.
  bool shard_state = false;
};

// How apply_gradients treats its gradients.
struct ApplyOptions {
  // tf.keras's skip_gradients_aggregation: in replica context the gradients are already the sums
  // across replicas (the caller all-reduced them, to clip or to time the sum), so each replica
  // applies the ones it is given and no collective runs. Every replica must pass the same sums,
  // or the copies of the variables drift apart.
  bool skip_gradients_aggregation = false;
};

// How Optimizer::gradient_buckets groups the gradients.
struct BucketOptions {
  // A bucket's collective starts once its gradients hold this many bytes (PyTorch DDP's
  // bucket_cap_mb is 25 MiB); the last bucket's starts at apply_gradients(buckets).
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  // The options of every bucket's collective (Compression::kBfloat16 for 16-bit gradients on
  // the wire, a timeout); merged with the strategy's like any collective's.
  CommunicationOptions communication;
};

class Optimizer;

// The gradients of one step, summed across replicas while the backward pass goes on (PyTorch
// DDP's buckets): add() takes each gradient as it is made and starts a bucket's all_reduce
// (reduce_scatter with sharded state) without waiting once the bucket is full, and
// Optimizer::apply_gradients(buckets) waits for the rest and applies the step. Made by
// Optimizer::gradient_buckets in a replica's fn, for that replica and that step only.
//
//   auto buckets = optimizer.gradient_buckets({.bucket_bytes = 1 << 20});
//   for (layer in reverse) buckets.add(layer.w, backward(layer));   // the collectives overlap
//   optimizer.apply_gradients(buckets);
//
// Every replica adds the same variables in the same order (checked: each bucket's collective
// names its variables in its signature, and a difference is an InvalidArgumentError naming
// both, thrown by apply_gradients). add() checks each pair as apply_gradients does.
class GradientBuckets {
 public:
  GradientBuckets(GradientBuckets&&) noexcept;
  GradientBuckets& operator=(GradientBuckets&&) noexcept;
  ~GradientBuckets();

  // Takes `variable`'s gradient for this step. InvalidArgumentError for a pair apply_gradients
  // would reject and for a variable added twice; FailedPreconditionError outside the replica
  // that made the buckets, or once they were applied.
  void add(const Variable& variable, const Tensor& gradient);

 private:
  friend class Optimizer;
  struct State;  // optimizer.cc
  explicit GradientBuckets(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one step: see above. Every optimizer shares the checks, the all_reduce and the slots;
  // a subclass gives only update_step.
  void apply_gradients(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) {
    apply_gradients(grads_and_vars, ApplyOptions{});
  }
  // The same step with options; without skip_gradients_aggregation it is the call above.
  void apply_gradients(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars, const ApplyOptions& options);

  // Creates the slot variables of `variables` that do not exist yet, in cross-replica context.
  void build(const std::vector<Variable>& variables);

  // In a replica's fn: empty buckets for this step's gradients (see GradientBuckets), and the
  // step that applies them once summed. Both collective, like apply_gradients; the result is
  // bit for bit apply_gradients' on the same gradients (docs/overlap.md says where the
  // cross-worker ring's summation order makes it differ, and by how much).
  // FailedPreconditionError outside a replica's fn; InvalidArgumentError for a bucket_bytes < 1.
  GradientBuckets gradient_buckets(const BucketOptions& options = {});
  void apply_gradients(GradientBuckets& buckets);

  // "SGD", "Adam": the prefix of the names of the optimizer's variables.
  const std::string& name() const { return name_; }
  double learning_rate() const { return learning_rate_; }
  // FailedPreconditionError inside a replica's fn: the replicas read it while they run.
  // InvalidArgumentError unless it is finite and >= 0 (also in the constructors).
  void set_learning_rate(double learning_rate);
  // The number of steps applied: an int64 scalar variable named "<name>/iterations".
  const Variable& iterations() const { return iterations_; }
  // The names of the slots each variable gets, e.g. {"momentum"} or {"m", "v"}.
  const std::vector<std::string>& slot_names() const { return slot_names_; }
  // The slot `slot_name` of `variable`, named "<name>/<variable name>/<slot_name>".
  // InvalidArgumentError when the optimizer has no such slot for it (yet).
  Variable get_slot(const Variable& variable, std::string_view slot_name) const;
  // iterations(), then the slots in the order they were created.
  std::vector<Variable> variables() const;
  // The state to checkpoint, for Checkpoint's `state`: iterations() and every slot, each under its
  // variable's name ("Adam/w/m"). Slots kept in shards are read whole (gathered from every
  // replica, across workers too: every worker must save) and written back into the shards, so a
  // checkpoint of an optimizer with sharded state restores into one without, and the other way
  // round, with any number of replicas. Take it once the slots exist (after build(variables) with
  // every variable the optimizer trains, or after the first step): FailedPreconditionError when
  // the optimizer has slot names (momentum, Adam) and no slots yet; and a state taken before slots
  // were made for another variable throws FailedPreconditionError naming it when it is saved or
  // restored, rather than leave those slots out.
  std::vector<std::pair<std::string, Saveable>> checkpoint_state() const;
  // Whether the slots are kept in shards (OptimizerOptions::shard_state).
  bool shards_state() const { return shard_state_; }

 protected:
  // Binds the optimizer to get_strategy() and creates iterations() there.
  Optimizer(std::string name, double learning_rate, std::vector<std::string> slot_names,
            const OptimizerOptions& options = {});

  // The step update_step applies. A component on the host is given its number; on a GPU the
  // count stays in device memory (no copy to the host and back per step), and the step's kernels
  // read it there, ordered on the replica's stream.
  struct Step {
    std::int64_t number = 0;  // counts from 1; 0 for a component on a GPU
    // On a GPU: the number of steps applied before this one, in the component's device memory.
    const std::int64_t* steps_before_on_device = nullptr;
  };

  // Updates one component of a variable in place, given the summed gradient, the variable's
  // component and its slots' components (slot_names() order), all tensors of one dtype (float32
  // or float64), shape and device. Runs concurrently for different components, so it may only
  // read the optimizer's settings.
  virtual void update_step(const Tensor& gradient, Tensor& variable, std::span<Tensor> slots,
                           const Step& step) const = 0;

 private:
  struct SlotTable;  // optimizer.cc
  friend class GradientBuckets;

  void check_variable(const Variable& var, std::size_t index, const char* method) const;
  void check(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) const;
  bool has_slots_for(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) const;
  void create_slots(const std::vector<Variable>& variables);
  // apply_gradients outside a replica's fn: every component steps with the given gradients.
  void apply_in_cross_replica_context(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars);
  // apply_gradients in the replica of `ctx`: the collective step, which updates its component.
  void apply_in_replica(ReplicaContext& ctx, const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                        const ApplyOptions& options);
  // apply_in_replica with sharded state, from this replica's gradients (the sums already, if
  // `summed`).
  void apply_sharded_in_replica(ReplicaContext& ctx, const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                                const std::vector<Tensor>& gradients, const detail::CallPurpose& purpose, bool summed);
  // With sharded state: updates this replica's shard of every variable, given the summed
  // gradients' `shards`, then all-gathers the shards into every replica's component.
  void apply_shards_in_replica(ReplicaContext& ctx, const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                               const std::vector<Tensor>& shards, const detail::CallPurpose& purpose);
  // FailedPreconditionError naming `method` unless `ctx` is a replica of the optimizer's strategy.
  void require_strategy_of(const ReplicaContext& ctx, const char* method) const;
  // The merge_call that creates the slots the listed variables lack (the first step only).
  void ensure_slots_in_replica(ReplicaContext& ctx, const std::vector<std::pair<Tensor, Variable>>& grads_and_vars,
                               const detail::CallPurpose& purpose);
  // Which part of each variable a replica updates: all of it, or with sharded state its shard.
  struct Part {
    int replica = -1;  // the global replica id whose shard; -1: the whole variable
    int replicas = 1;
  };
  // Updates component `component` of every variable (its `part`) and its slots, given the
  // gradients of that part, and counts the step there.
  void update_component(const std::vector<Tensor>& gradients,
                        const std::vector<std::pair<Tensor, Variable>>& grads_and_vars, int component,
                        const Part& part) const;
  // `part`'s shard of `whole`, flattened: a view sharing its storage.
  static Tensor shard_view(const Tensor& whole, const Part& part);
  // UnimplementedError naming `method` when the slots are kept in shards.
  void require_unsharded(const char* method) const;

  // The strategy the optimizer was made for, held by identity: it may be destroyed first.
  std::shared_ptr<distribute::detail::StrategyIdentity> strategy_;
  std::string name_;
  std::string apply_action_;  // "SGD.apply_gradients": what its gradient lists' all_reduce is for
  double learning_rate_;
  std::vector<std::string> slot_names_;
  bool shard_state_;
  Variable iterations_;
  // Written only in cross-replica context or in the merge_fn, while every replica waits. Shared
  // with the states checkpoint_state() gave, which check that no slots were made after them.
  std::shared_ptr<SlotTable> slots_;
};

}  // namespace distribute::optimizers
