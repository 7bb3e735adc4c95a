// The cross-worker steps of the layers above the strategy: a ballot, then the coordinator.
#include "strategy/cross_worker.h"

#include "distribute/replica/internal/collective_call.h"
#include "distribute/replica/internal/context_stack.h"
#include "distribute/strategy/strategy.h"
#include "replica/call_signature.h"

namespace distribute::detail {
namespace {

// The timeout of a strategy's cross-worker steps outside any call's options.
std::chrono::duration<double> step_timeout(const StrategyExtended& extended) {
  return CommunicationOptions{}.merged_with(extended.default_options()).timeout;
}

// The coordinator of a strategy of more than one worker; null otherwise.
cluster::Coordinator* coordinator_across_workers(StrategyExtended& extended) {
  cluster::Coordinator* coordinator = extended.coordinator();
  return coordinator != nullptr && coordinator->num_workers() > 1 ? coordinator : nullptr;
}

}  // namespace

void agree_on_cross_replica_step(cluster::Coordinator& coordinator, collective::CollectiveKind kind, ReduceOp op,
                                 int open_axis, const Tensor& value, std::chrono::duration<double> timeout,
                                 std::exception_ptr error) {
  CollectiveCall call;
  call.op.kind = kind;
  call.op.op = op;
  call.op.axis = open_axis;
  call.op.sequence = coordinator.next_cross_replica_sequence();
  call.op.options.timeout = timeout;
  const collective::BufferRef leaf{nullptr, error ? &scalar_shape() : &value.shape(),
                                   error ? DType::kFloat32 : value.dtype()};
  call.op.inputs = std::span(&leaf, 1);
  LeafDigest leaves;
  leaves.add(leaf.dtype, leaf.shape->span(), open_axis);
  call.leaf_digest = leaves.value();
  call.signature = signature_digest(call);
  coordinator.agree(CallBallot(error ? cluster::Ballot::Status::kFailed : cluster::Ballot::Status::kCall, call, error));
}

Tensor broadcast_from_chief(StrategyExtended& extended, const Tensor& mine) {
  cluster::Coordinator* coordinator = coordinator_across_workers(extended);
  if (coordinator == nullptr) return mine;
  const auto timeout = step_timeout(extended);
  // A copy: on the other workers the broadcast overwrites it.
  Tensor value = mine.device().is_cpu() ? mine.clone() : mine.to(Device::cpu());
  agree_on_cross_replica_step(*coordinator, collective::CollectiveKind::kBroadcastTo, ReduceOp::kSum, -1, value,
                              timeout, nullptr);
  coordinator->group().broadcast(value.raw_data(), value.nbytes(), 0, timeout, "the chief's value");
  return mine.device().is_cpu() ? value : value.to(mine.device());
}

std::string broadcast_from_chief(StrategyExtended& extended, std::string bytes) {
  cluster::Coordinator* coordinator = coordinator_across_workers(extended);
  if (coordinator == nullptr) return bytes;
  const auto timeout = step_timeout(extended);
  // The bytes' size differs between the chief and the others: the ballot is of a scalar.
  agree_on_cross_replica_step(*coordinator, collective::CollectiveKind::kBroadcastTo, ReduceOp::kSum, -1,
                              Tensor::scalar(std::int64_t{0}, Device::cpu()), timeout, nullptr);
  return coordinator->broadcast_from_chief(std::move(bytes), timeout, "the chief's bytes");
}

void broadcast_outcome_from_chief(StrategyExtended& extended, std::exception_ptr error) {
  cluster::Coordinator* coordinator = coordinator_across_workers(extended);
  if (coordinator == nullptr) {
    if (error) std::rethrow_exception(error);
    return;
  }
  const auto timeout = step_timeout(extended);
  agree_on_cross_replica_step(*coordinator, collective::CollectiveKind::kBroadcastTo, ReduceOp::kSum, -1,
                              Tensor::scalar(std::int64_t{0}, Device::cpu()), timeout, nullptr);
  coordinator->broadcast_outcome_from_chief(std::move(error), timeout, "the chief's outcome");
}

void agree_on_checkpoint(StrategyExtended& extended, const CallPurpose& purpose) {
  cluster::Coordinator* coordinator = coordinator_across_workers(extended);
  if (coordinator == nullptr) return;
  CollectiveCall call;
  call.op.kind = collective::CollectiveKind::kCheckpoint;
  call.op.sequence = coordinator->next_cross_replica_sequence();
  call.op.options.timeout = step_timeout(extended);
  call.purpose = &purpose;
  call.leaf_digest = LeafDigest().value();
  call.signature = signature_digest(call);
  coordinator->agree(CallBallot(cluster::Ballot::Status::kCall, call));
}

BetweenRuns::BetweenRuns(StrategyExtended& extended) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const ThreadMode& mode = current_mode();
  if (mode.strategy == &extended.container_strategy() && mode.run_depth > 0) return;
  held_ = extended.run_mutex();
  if (held_ != nullptr) held_->lock();
}

BetweenRuns::~BetweenRuns() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (held_ != nullptr) held_->unlock();
}

}  // namespace distribute::detail
