// The reduction-to-one-device backend (tf.distribute.ReductionToOneDevice): the first replica's
// device reduces every replica's input (copying inputs from other memory spaces there first), and
// every other replica copies the result from it. It works for any set of devices - logical GPUs
// sharing one physical GPU, which NCCL refuses, distinct GPUs, CPU devices - because it uses only
// copies, one reduction kernel and the ordering marks of detail::ReplicaDevice. Device work is
// issued, not waited for: replicas' streams are ordered by marks, and the two host barriers of a
// collective only order the issuing.
#pragma once

#include <exception>
#include <vector>

#include "absl/functional/function_ref.h"
#include "collective/communicator.h"
#include "collective/rendezvous.h"
#include "device/replica_device.h"

namespace distribute::collective::one_device {

class OneDeviceCommunicator final : public Communicator {
 public:
  // devices[r] is replica r's; they outlive the communicator.
  OneDeviceCommunicator(std::vector<detail::ReplicaDevice*> devices, detail::WaitPolicy policy);
  std::string_view name() const override { return "ReductionToOneDevice"; }
  CommunicationImplementation implementation() const override { return CommunicationImplementation::kAuto; }
  void stage(int rank, CollectiveOp& op) override;
  void all_reduce(int rank, std::span<CollectiveOp* const> ops) override;
  void all_gather(int rank, std::span<CollectiveOp* const> ops) override;
  void reduce_scatter(int rank, std::span<CollectiveOp* const> ops) override;

 private:
  // Runs `read` (this replica's reads of every replica's inputs, issued on its device) once every
  // input is ready, then waits until every replica's reads are done, so no input is overwritten
  // while another replica reads it.
  void read_every_input(int rank, absl::FunctionRef<void()> read);

  std::vector<detail::ReplicaDevice*> devices_;
  Rendezvous phase_;
  std::exception_ptr root_error_;  // written by replica 0 before the first barrier of an all_reduce
};

}  // namespace distribute::collective::one_device
