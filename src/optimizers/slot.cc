// The two kinds of optimizer slot: whole (a variable) and in shards.
#include "optimizers/slot.h"

#include <utility>

#include "distribute/check.h"
#include "distribute/errors.h"
#include "distribute/strategy/strategy.h"
#include "distribute/values/distributed_values.h"

namespace distribute::optimizers::detail {
namespace {

class WholeSlot final : public Slot {
 public:
  WholeSlot(std::string name, const Variable& of)
      : variable_(Tensor::zeros(of.dtype(), of.shape(), Device::cpu()),
                  VariableOptions{.name = std::move(name), .trainable = false}) {}

  const std::string& name() const override { return variable_.name(); }
  Tensor part(int component) const override { return variable_.component(component); }
  Saveable saveable() const override { return variable_; }
  const Variable* variable() const override { return &variable_; }

 private:
  Variable variable_;
};

class ShardedSlot final : public Slot {
 public:
  ShardedSlot(std::string name, const Variable& of, Strategy& strategy,
              std::shared_ptr<distribute::detail::StrategyIdentity> identity, std::string optimizer)
      : name_(std::move(name)),
        dtype_(of.dtype()),
        shape_(of.shape()),
        identity_(std::move(identity)),
        optimizer_(std::move(optimizer)),
        replicas_(strategy.num_replicas_in_sync()) {
    const int first = strategy.extended().worker_id() * strategy.extended().num_local_replicas();
    for (int c = 0; c < of.num_components(); ++c) {
      const Shard shard = shard_of(shape_.num_elements(), replicas_, first + c);
      shards_.push_back(Tensor::zeros(dtype_, Shape{shard.size}, of.component(c).device()));
    }
  }

  const std::string& name() const override { return name_; }
  Tensor part(int component) const override {
    // The shards were cut for the replicas of the strategy's first workers; an elastic strategy's
    // replicas change with its workers, and these shards would then be the wrong parts.
    DISTRIBUTE_CHECK(identity_->num_replicas_in_sync() == replicas_, FailedPreconditionError, optimizer_,
                     ": the slot ", name_, " is in shards cut for ", replicas_, " replicas, and its strategy now has ",
                     identity_->num_replicas_in_sync(), " (an elastic job's workers changed); an elastic job's "
                     "optimizer needs OptimizerOptions::shard_state off");
    return shards_[static_cast<std::size_t>(component)];
  }
  const Variable* variable() const override { return nullptr; }

  Saveable saveable() const override {
    // Read: every replica's shard, in replica order, is the flattened slot.
    auto read = [identity = identity_, optimizer = optimizer_, shards = shards_, shape = shape_] {
      Strategy& owner = identity->get(optimizer);
      return owner.gather(PerReplica<Tensor>(shards), 0).reshape(shape);
    };
    // Write: each of this worker's components takes its shard of the value.
    auto write = [identity = identity_, optimizer = optimizer_, shards = shards_](const Tensor& value) {
      Strategy& owner = identity->get(optimizer);
      const int first = owner.extended().worker_id() * owner.extended().num_local_replicas();
      for (std::size_t c = 0; c < shards.size(); ++c) {
        const Shard shard = shard_of(value.num_elements(), owner.num_replicas_in_sync(), first + static_cast<int>(c));
        const Tensor from = value.reshape(Shape{value.num_elements()}).slice(shard.begin, shard.begin + shard.size);
        Tensor to = shards[c];
        distribute::detail::copy_bytes(to.raw_data(), to.device(), from.raw_data(), from.device(), to.nbytes());
      }
    };
    return Saveable(dtype_, shape_, std::move(read), std::move(write));
  }

 private:
  std::string name_;
  DType dtype_;
  Shape shape_;
  std::shared_ptr<distribute::detail::StrategyIdentity> identity_;
  std::string optimizer_;
  std::vector<Tensor> shards_;  // [local component]
  int replicas_;                // that the shards were cut for
};

}  // namespace

std::unique_ptr<Slot> make_whole_slot(std::string name, const Variable& of) {
  return std::make_unique<WholeSlot>(std::move(name), of);
}

std::unique_ptr<Slot> make_sharded_slot(std::string name, const Variable& of, Strategy& strategy,
                                        std::shared_ptr<distribute::detail::StrategyIdentity> identity,
                                        std::string optimizer) {
  return std::make_unique<ShardedSlot>(std::move(name), of, strategy, std::move(identity), std::move(optimizer));
}

}  // namespace distribute::optimizers::detail
