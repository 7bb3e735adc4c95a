// input::internal::InputWorkers: where a distributed dataset's batches go (the replicas' devices,
// in replica order, and the InputOptions), and the rule that a distributed dataset is read in the
// caller's loop, never inside a replica's function.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "distribute/device/device.h"
#include "distribute/device/tensor.h"
#include "distribute/input/input_options.h"
#include "distribute/input/internal/worker_agreement.h"
#include "distribute/values/value_context.h"

namespace distribute::input::internal {

class InputWorkers {
 public:
  // InvalidArgumentError for an empty device list, a buffer size < 1, and
  // experimental_place_dataset_on_device without kPerReplica or with fetch_to_device. `context`
  // places the devices among every worker's replicas: this worker's are replicas
  // input_pipeline_id() * devices.size() ... of context.num_replicas_in_sync() (default: all).
  // `agreement`, the multi-worker strategy's, joins this worker's iterators to the others'.
  InputWorkers(std::vector<Device> devices, const InputOptions& options,
               std::optional<InputContext> context = std::nullopt,
               std::weak_ptr<WorkerAgreement> agreement = {});

  // This worker's replicas.
  int num_replicas() const { return static_cast<int>(devices_.size()); }
  // Every worker's replicas, and the global id of this worker's first.
  int num_replicas_in_sync() const { return num_replicas_in_sync_; }
  int first_replica() const { return first_replica_; }
  // What dataset_fn of distribute_datasets_from_function receives: this worker's pipeline, or in
  // kPerReplica mode local replica `replica`'s.
  InputContext input_context() const { return context_; }
  InputContext replica_input_context(int replica) const {
    return InputContext(num_replicas_in_sync_, first_replica_ + replica, num_replicas_in_sync_);
  }
  bool per_replica() const { return per_replica_; }
  // Where replica `replica`'s dataset_fn makes its tensors: the replica's device when
  // experimental_place_dataset_on_device, else null (the thread's default).
  const Device* dataset_device(int replica) const {
    return place_dataset_on_device_ ? &devices_[static_cast<std::size_t>(replica)] : nullptr;
  }
  const std::vector<Device>& devices() const { return devices_; }
  std::size_t buffer_size() const { return buffer_size_; }
  // Whether the iterators agree on each step with other workers' (see worker_agreement.h).
  bool agrees_across_workers() const { return agrees_; }
  // The agreement; FailedPreconditionError when its strategy is gone.
  std::shared_ptr<WorkerAgreement> agreement() const;

  // `batch` where replica `replica` reads it. Host memory is one space, so a host batch serves a
  // CPU replica where it is, through a view that reports the replica's device when fetch_to_device
  // or place_dataset_on_device (Tensor::view_on); a GPU replica gets a copy on its GPU when fetch_to_device or
  // place_dataset_on_device (Tensor::to: from a thread that is no replica's, on the GPU's legacy
  // stream, which every replica stream of that GPU waits for); else the batch stays where it is.
  Tensor place(const Tensor& batch, int replica) const;

 private:
  std::vector<Device> devices_;
  InputContext context_;
  int num_replicas_in_sync_;
  int first_replica_;
  bool to_device_;
  bool per_replica_;
  bool place_dataset_on_device_;
  std::size_t buffer_size_;
  std::weak_ptr<WorkerAgreement> agreement_;
  bool agrees_;
};

// While it lives, tensors made on this thread without a device go to `device` (nothing changes
// for null): dataset_fn runs in one for its replica's dataset_device().
class DatasetDeviceScope {
 public:
  explicit DatasetDeviceScope(const Device* device);
  DatasetDeviceScope(const DatasetDeviceScope&) = delete;
  DatasetDeviceScope& operator=(const DatasetDeviceScope&) = delete;
  ~DatasetDeviceScope();

 private:
  bool active_;
  const Device* previous_ = nullptr;
};

// UnimplementedError for kPerReplica: experimental_distribute_dataset splits one dataset.
void check_splittable(const InputOptions& options);

// FailedPreconditionError when called inside a replica's function (the fn of any strategy's run):
// `method` names the call in the message.
void check_not_in_replica(const char* method);

// A "get_next" span on the timeline's input track, from the construction to the destruction: a
// step's wait for its batches (and the workers' agreement on it). Out of line, as the timeline is
// the library's own; while none records it costs a call and one relaxed load.
class GetNextSpan {
 public:
  GetNextSpan();
  ~GetNextSpan();
  GetNextSpan(const GetNextSpan&) = delete;
  GetNextSpan& operator=(const GetNextSpan&) = delete;

 private:
  bool recorded_ = false;
};

}  // namespace distribute::input::internal
