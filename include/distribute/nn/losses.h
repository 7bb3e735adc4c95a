// Loss helpers for distributed training loops (tf.nn.compute_average_loss). With N replicas each
// computing the loss of its own part of the global batch, a replica's loss must be divided by the
// global batch size, not by its own: the gradients are then summed across replicas (as
// Optimizer::apply_gradients does) and equal those of the whole batch on one device.
//
//   Tensor loss = nn::compute_average_loss(per_example_loss);  // inside the fn passed to run
#pragma once

#include <cstdint>
#include <optional>

#include "distribute/device/tensor.h"

namespace distribute::nn {

// The sum of every element of per_example_loss (rank >= 1, dimension 0 the replica's examples)
// divided by global_batch_size; by default the replica's batch size (dimension 0) times
// get_strategy().num_replicas_in_sync(). Returns a scalar of the loss's dtype on its device.
// InvalidArgumentError for an undefined, rank-0 or non-floating loss, or a global batch size that
// is not positive; FailedPreconditionError without global_batch_size in a strategy's
// cross-replica context, where no replica's batch is meant.
Tensor compute_average_loss(const Tensor& per_example_loss,
                            std::optional<std::int64_t> global_batch_size = std::nullopt);

}  // namespace distribute::nn
