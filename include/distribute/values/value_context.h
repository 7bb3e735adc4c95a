// ValueContext and InputContext: what a per-replica value function or an input pipeline function
// learns about the replicas (tf.distribute.experimental.ValueContext / tf.distribute.InputContext).
#pragma once

#include <cstdint>
#include <ostream>

namespace distribute {

class ValueContext {
 public:
  // Throws InvalidArgumentError unless 0 <= replica_id_in_sync_group < num_replicas_in_sync.
  explicit ValueContext(int replica_id_in_sync_group = 0, int num_replicas_in_sync = 1);
  int replica_id_in_sync_group() const { return replica_id_; }
  int num_replicas_in_sync() const { return num_replicas_; }

 private:
  int replica_id_;
  int num_replicas_;
};

class InputContext {
 public:
  // Throws InvalidArgumentError unless num_input_pipelines >= 1, 0 <= input_pipeline_id <
  // num_input_pipelines and num_replicas_in_sync >= 1.
  explicit InputContext(int num_input_pipelines = 1, int input_pipeline_id = 0,
                        int num_replicas_in_sync = 1);

  // global_batch_size / num_replicas_in_sync(); throws InvalidArgumentError when it does not divide.
  std::int64_t get_per_replica_batch_size(std::int64_t global_batch_size) const;
  int num_replicas_in_sync() const { return num_replicas_; }
  int input_pipeline_id() const { return pipeline_id_; }
  int num_input_pipelines() const { return num_pipelines_; }

 private:
  int num_pipelines_;
  int pipeline_id_;
  int num_replicas_;
};

std::ostream& operator<<(std::ostream& os, const ValueContext& context);
std::ostream& operator<<(std::ostream& os, const InputContext& context);

}  // namespace distribute
