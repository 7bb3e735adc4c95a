// InputOptions: how a distributed dataset delivers its batches (tf.distribute.InputOptions), the
// options of Strategy::experimental_distribute_dataset and distribute_datasets_from_function.
#pragma once

#include <cstdint>

namespace distribute {

struct InputOptions {
  // Place each replica's batch on that replica's device, ready before its step reads it. GPU
  // replicas get a copy on their GPU; CPU replicas share host memory, where the batch already is,
  // so theirs stays a view. When false, batches stay where the dataset made them (host memory).
  bool experimental_fetch_to_device = true;
  // Steps prepared ahead by the iterator's thread (split and placed: one batch per replica per
  // step). Must be >= 1.
  std::int64_t experimental_per_replica_buffer_size = 2;
};

}  // namespace distribute
