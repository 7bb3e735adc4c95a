// ValueContext and InputContext: checked construction, batch splitting, printing.
#include "distribute/check.h"
#include "distribute/values/value_context.h"

namespace distribute {

ValueContext::ValueContext(int replica_id_in_sync_group, int num_replicas_in_sync)
    : replica_id_(replica_id_in_sync_group), num_replicas_(num_replicas_in_sync) {
  DISTRIBUTE_CHECK(num_replicas_ >= 1, InvalidArgumentError, "ValueContext: num_replicas_in_sync is ",
                   num_replicas_, "; it must be >= 1");
  DISTRIBUTE_CHECK(replica_id_ >= 0 && replica_id_ < num_replicas_, InvalidArgumentError,
                   "ValueContext: replica_id_in_sync_group ", replica_id_, " is not in [0, ",
                   num_replicas_, ")");
}

InputContext::InputContext(int num_input_pipelines, int input_pipeline_id, int num_replicas_in_sync)
    : num_pipelines_(num_input_pipelines),
      pipeline_id_(input_pipeline_id),
      num_replicas_(num_replicas_in_sync) {
  DISTRIBUTE_CHECK(num_pipelines_ >= 1, InvalidArgumentError, "InputContext: num_input_pipelines is ",
                   num_pipelines_, "; it must be >= 1");
  DISTRIBUTE_CHECK(pipeline_id_ >= 0 && pipeline_id_ < num_pipelines_, InvalidArgumentError,
                   "InputContext: input_pipeline_id ", pipeline_id_, " is not in [0, ", num_pipelines_, ")");
  DISTRIBUTE_CHECK(num_replicas_ >= 1, InvalidArgumentError, "InputContext: num_replicas_in_sync is ",
                   num_replicas_, "; it must be >= 1");
}

std::int64_t InputContext::get_per_replica_batch_size(std::int64_t global_batch_size) const {
  DISTRIBUTE_CHECK(global_batch_size >= 0, InvalidArgumentError, "get_per_replica_batch_size: the global batch size ",
                   global_batch_size, " is negative");
  DISTRIBUTE_CHECK(global_batch_size % num_replicas_ == 0, InvalidArgumentError,
                   "get_per_replica_batch_size: the global batch size ", global_batch_size,
                   " is not divisible by num_replicas_in_sync ", num_replicas_,
                   "; choose a global batch size that is a multiple of ", num_replicas_);
  return global_batch_size / num_replicas_;
}

std::ostream& operator<<(std::ostream& os, const ValueContext& context) {
  return os << "ValueContext(replica " << context.replica_id_in_sync_group() << " of "
            << context.num_replicas_in_sync() << ")";
}

std::ostream& operator<<(std::ostream& os, const InputContext& context) {
  return os << "InputContext(input pipeline id " << context.input_pipeline_id() << ", total: "
            << context.num_input_pipelines() << ")";
}

}  // namespace distribute
