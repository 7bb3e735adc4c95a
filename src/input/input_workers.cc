// Where distributed batches go, and from where a distributed dataset may be read.
#include "distribute/input/internal/input_workers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/timeline.h"
#include "distribute/check.h"
#include "distribute/replica/internal/context_stack.h"

namespace distribute::input::internal {

InputWorkers::InputWorkers(std::vector<Device> devices, const InputOptions& options,
                           std::optional<InputContext> context, std::weak_ptr<WorkerAgreement> agreement)
    : devices_(std::move(devices)),
      context_(context.value_or(InputContext(1, 0, std::max<int>(static_cast<int>(devices_.size()), 1)))),
      num_replicas_in_sync_(context ? context->num_replicas_in_sync() : static_cast<int>(devices_.size())),
      first_replica_(context ? context->input_pipeline_id() * static_cast<int>(devices_.size()) : 0),
      to_device_(options.experimental_fetch_to_device || options.experimental_place_dataset_on_device),
      per_replica_(options.experimental_replication_mode == InputReplicationMode::kPerReplica),
      place_dataset_on_device_(options.experimental_place_dataset_on_device),
      agreement_(std::move(agreement)),
      agrees_(!agreement_.expired()) {
  DISTRIBUTE_CHECK(!devices_.empty(), InvalidArgumentError,
                   "DistributedDataset: worker_devices is empty; it needs one device per replica");
  DISTRIBUTE_CHECK(options.experimental_per_replica_buffer_size >= 1, InvalidArgumentError,
                   "InputOptions: experimental_per_replica_buffer_size is ",
                   options.experimental_per_replica_buffer_size, "; it must be >= 1");
  DISTRIBUTE_CHECK(!place_dataset_on_device_ || per_replica_, InvalidArgumentError,
                   "InputOptions: experimental_place_dataset_on_device places each replica's own input pipeline on "
                   "its device, so it needs experimental_replication_mode = InputReplicationMode::kPerReplica, not "
                   "kPerWorker");
  DISTRIBUTE_CHECK(!place_dataset_on_device_ || !options.experimental_fetch_to_device, InvalidArgumentError,
                   "InputOptions: experimental_place_dataset_on_device and experimental_fetch_to_device are both "
                   "set; a dataset made on its replica's device has nothing to fetch there, so set "
                   "experimental_fetch_to_device = false");
  buffer_size_ = static_cast<std::size_t>(options.experimental_per_replica_buffer_size);
}

Tensor InputWorkers::place(const Tensor& batch, int replica) const {
  const Device& device = devices_[static_cast<std::size_t>(replica)];
  const Device& where = batch.device();
  if (!to_device_ || where == device) return batch;
  if (device.is_cpu() && where.is_cpu()) return batch.view_on(device);
  return batch.to(device);
}

std::shared_ptr<WorkerAgreement> InputWorkers::agreement() const {
  std::shared_ptr<WorkerAgreement> agreement = agreement_.lock();
  DISTRIBUTE_CHECK(agreement != nullptr, FailedPreconditionError,
                   "DistributedIterator::get_next: the multi-worker strategy that distributed this dataset was "
                   "destroyed; iterate a distributed dataset while its strategy lives");
  return agreement;
}

DatasetDeviceScope::DatasetDeviceScope(const Device* device) : active_(device != nullptr) {
  if (active_) previous_ = detail::set_default_device(device);
}

DatasetDeviceScope::~DatasetDeviceScope() {
  if (active_) detail::set_default_device(previous_);
}

void check_splittable(const InputOptions& options) {
  DISTRIBUTE_CHECK(options.experimental_replication_mode != InputReplicationMode::kPerReplica, UnimplementedError,
                   "experimental_distribute_dataset: InputReplicationMode::kPerReplica is only supported by "
                   "distribute_datasets_from_function (one input pipeline per replica); "
                   "experimental_distribute_dataset splits one dataset, so use kPerWorker");
}

void check_not_in_replica(const char* method) {
  // The stack holds a replica context only inside a run (outside any scope, the default replica
  // context that get_replica_context() returns is not on it).
  DISTRIBUTE_CHECK(detail::current_mode().replica_context == nullptr, FailedPreconditionError, method,
                   ": a distributed dataset cannot be iterated inside a replica's function; iterate it in the "
                   "caller's loop and pass each PerReplica batch to Strategy::run");
}

GetNextSpan::GetNextSpan() {
  if (detail::timeline::on()) [[unlikely]] {
    detail::timeline::begin(detail::timeline::kInputTrack, "get_next", {});
    recorded_ = true;
  }
}

GetNextSpan::~GetNextSpan() {
  if (recorded_) [[unlikely]] detail::timeline::end(detail::timeline::kInputTrack, "get_next");
}

}  // namespace distribute::input::internal
