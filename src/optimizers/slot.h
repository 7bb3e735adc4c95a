// How an optimizer keeps one slot (a momentum, one of Adam's moments) of one variable: whole, as a
// mirrored variable of the optimizer's strategy, or in shards (OptimizerOptions::shard_state), each
// replica's part on its device and no variable at all. The optimizer's update only asks a slot for
// the part a component updates, and a checkpoint only for the slot whole, so the two kinds differ
// in nothing else.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distribute/collective/shard.h"
#include "distribute/device/tensor.h"
#include "distribute/variables/saveable.h"
#include "distribute/variables/variable.h"

namespace distribute {
class Strategy;
namespace detail {
class StrategyIdentity;
}  // namespace detail
}  // namespace distribute

namespace distribute::optimizers::detail {

class Slot {
 public:
  virtual ~Slot() = default;
  // "<optimizer>/<variable>/<slot>", as get_slot and checkpoints name it.
  virtual const std::string& name() const = 0;
  // What the update of local component `component` reads and writes: that component of the whole
  // slot, or that component's shard.
  virtual Tensor part(int component) const = 0;
  // The slot whole, to save or restore.
  virtual Saveable saveable() const = 0;
  // The slot as a variable; null when it is kept in shards.
  virtual const Variable* variable() const = 0;
};

// A slot of `of` kept whole: a variable of the current strategy, zeros like `of`.
std::unique_ptr<Slot> make_whole_slot(std::string name, const Variable& of);

// A slot of `of` kept in shards across `strategy`'s replicas: local component c keeps replica
// (worker, c)'s shard, zeros, on that component's device. Saved, it is read whole (gathered from
// every replica, across workers too: every worker must save) and written back into the shards,
// through the strategy held by `identity` (named `optimizer` in its errors).
std::unique_ptr<Slot> make_sharded_slot(std::string name, const Variable& of, Strategy& strategy,
                                        std::shared_ptr<distribute::detail::StrategyIdentity> identity,
                                        std::string optimizer);

}  // namespace distribute::optimizers::detail
