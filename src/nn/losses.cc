// nn::compute_average_loss: a replica's loss over the global batch.
#include "distribute/nn/losses.h"

#include "distribute/strategy/context.h"
#include "distribute/strategy/strategy.h"

namespace distribute::nn {

Tensor compute_average_loss(const Tensor& per_example_loss, std::optional<std::int64_t> global_batch_size) {
  DISTRIBUTE_CHECK(per_example_loss.defined(), InvalidArgumentError,
                   "nn::compute_average_loss: per_example_loss is an undefined Tensor");
  DISTRIBUTE_CHECK(per_example_loss.rank() >= 1, InvalidArgumentError,
                   "nn::compute_average_loss: per_example_loss has rank 0; it needs rank >= 1 with one loss per "
                   "example along dimension 0");
  DISTRIBUTE_CHECK(is_floating(per_example_loss.dtype()), InvalidArgumentError,
                   "nn::compute_average_loss: per_example_loss has dtype ", dtype_name(per_example_loss.dtype()),
                   "; it needs a floating-point dtype");
  if (!global_batch_size) {
    DISTRIBUTE_CHECK(!(has_strategy() && in_cross_replica_context()), FailedPreconditionError,
                     "nn::compute_average_loss: called without global_batch_size in the cross-replica context of ",
                     get_strategy().name(), "; call it inside the fn passed to Strategy::run, or pass the global "
                     "batch size");
    global_batch_size = per_example_loss.shape()[0] * get_strategy().num_replicas_in_sync();
  }
  DISTRIBUTE_CHECK(*global_batch_size > 0, InvalidArgumentError, "nn::compute_average_loss: the global batch size is ",
                   *global_batch_size, "; it must be positive");
  const Tensor host = per_example_loss.device().is_cpu() ? per_example_loss : per_example_loss.to(Device::cpu());
  return dispatch_dtype(host.dtype(), [&]<class T>(TypeTag<T>) {
    const T sum = host.flat<T>().sum();
    return Tensor::scalar<T>(static_cast<T>(sum / static_cast<T>(*global_batch_size)), per_example_loss.device());
  });
}

}  // namespace distribute::nn
