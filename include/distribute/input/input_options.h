// InputOptions: how a distributed dataset delivers its batches (tf.distribute.InputOptions), the
// options of Strategy::experimental_distribute_dataset and distribute_datasets_from_function.
#pragma once

#include <cstdint>

namespace distribute {

// How many input pipelines distribute_datasets_from_function makes (tf.distribute.
// InputReplicationMode).
enum class InputReplicationMode {
  // One per worker: dataset_fn is called once, and the worker's replicas take its elements in turn.
  kPerWorker,
  // One per replica: dataset_fn is called once for each of this worker's replicas, with
  // input_pipeline_id() = the replica's global id and num_input_pipelines() = the replicas in
  // sync, and each element of replica r's dataset is replica r's batch of a step. Only
  // distribute_datasets_from_function supports it (UnimplementedError in
  // experimental_distribute_dataset, which splits one dataset between the replicas).
  kPerReplica,
};

// The combinations TensorFlow refuses are an InvalidArgumentError when the dataset is distributed:
// experimental_place_dataset_on_device without kPerReplica, or with experimental_fetch_to_device.
struct InputOptions {
  // Place each replica's batch on that replica's device, ready before its step reads it. GPU
  // replicas get a copy on their GPU; CPU replicas share host memory, where the batch already is,
  // so theirs stays a view, which reports the replica's device (CPU:1 for a replica on CPU:1).
  // When false, batches stay where the dataset made them (host memory).
  bool experimental_fetch_to_device = true;
  InputReplicationMode experimental_replication_mode = InputReplicationMode::kPerWorker;
  // Make each replica's input pipeline on its device: dataset_fn, called for replica r, creates
  // tensors on replica r's device when it names none, and every element reaches the replica on
  // its device. Needs kPerReplica, and experimental_fetch_to_device = false (the dataset is
  // already where its replica reads it, so there is nothing to fetch).
  bool experimental_place_dataset_on_device = false;
  // Steps prepared ahead by the iterator's thread (split and placed: one batch per replica per
  // step). Must be >= 1.
  std::int64_t experimental_per_replica_buffer_size = 2;
};

}  // namespace distribute
