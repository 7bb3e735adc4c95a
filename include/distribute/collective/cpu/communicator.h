// The shared-memory backend for replicas that are threads of one process (logical CPU devices).
//
// all_reduce is slice-parallel: the nest's leaves are laid end to end in one virtual byte range,
// cut into one slice per replica at cache-line boundaries; each replica reduces its slice across
// all N inputs and writes the result straight into every replica's output. No staging buffer,
// no packing copies, no allocation: each replica reads S and writes S bytes. all_gather: each
// replica fills its own output from every input. One uninterruptible barrier ends each
// collective, so no replica frees a buffer another still reads.
#pragma once

#include "distribute/collective/barrier.h"
#include "distribute/collective/communicator.h"

namespace distribute::collective::cpu {

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(int size, detail::WaitPolicy policy);
  std::string_view name() const override { return "cpu"; }
  void all_reduce(int rank, std::span<CollectiveCall* const> calls) override;
  void all_gather(int rank, std::span<CollectiveCall* const> calls) override;

 private:
  Rendezvous done_;
};

}  // namespace distribute::collective::cpu
