// Where distributed batches go, and from where a distributed dataset may be read.
#include "distribute/input/internal/input_workers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "distribute/check.h"
#include "distribute/replica/internal/context_stack.h"

namespace distribute::input::internal {

InputWorkers::InputWorkers(std::vector<Device> devices, const InputOptions& options,
                           std::optional<InputContext> context)
    : devices_(std::move(devices)),
      context_(context.value_or(InputContext(1, 0, std::max<int>(static_cast<int>(devices_.size()), 1)))),
      num_replicas_in_sync_(context ? context->num_replicas_in_sync() : static_cast<int>(devices_.size())),
      first_replica_(context ? context->input_pipeline_id() * static_cast<int>(devices_.size()) : 0),
      fetch_to_device_(options.experimental_fetch_to_device) {
  DISTRIBUTE_CHECK(!devices_.empty(), InvalidArgumentError,
                   "DistributedDataset: worker_devices is empty; it needs one device per replica");
  DISTRIBUTE_CHECK(options.experimental_per_replica_buffer_size >= 1, InvalidArgumentError,
                   "InputOptions: experimental_per_replica_buffer_size is ",
                   options.experimental_per_replica_buffer_size, "; it must be >= 1");
  buffer_size_ = static_cast<std::size_t>(options.experimental_per_replica_buffer_size);
}

Tensor InputWorkers::place(const Tensor& batch, int replica) const {
  const Device& device = devices_[static_cast<std::size_t>(replica)];
  const Device& where = batch.device();
  if (!fetch_to_device_ || where == device || (device.is_cpu() && where.is_cpu())) return batch;
  return batch.to(device);
}

void check_not_in_replica(const char* method) {
  // The stack holds a replica context only inside a run (outside any scope, the default replica
  // context that get_replica_context() returns is not on it).
  DISTRIBUTE_CHECK(detail::current_mode().replica_context == nullptr, FailedPreconditionError, method,
                   ": a distributed dataset cannot be iterated inside a replica's function; iterate it in the "
                   "caller's loop and pass each PerReplica batch to Strategy::run");
}

}  // namespace distribute::input::internal
