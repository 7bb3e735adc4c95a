// The shared-memory backend for replicas that are threads of one process (logical CPU devices).
//
// all_reduce is slice-parallel: the nest's leaves are laid end to end in one virtual byte range,
// cut into chunks at cache-line boundaries; each replica owns a contiguous 1/N of the chunks and
// claims them from its own counter (then steals from the others' when it is done), reduces each
// across all N inputs and writes the result straight into every replica's output. No staging buffer,
// no packing copies, no allocation: each replica reads S and writes S bytes. When the inputs and
// outputs together outgrow the shared cache, the outputs are written with streaming stores, so
// writing them does not first read their old contents into the cache. all_gather: each
// replica fills its own output from every input (in place: from every other one).
// reduce_scatter: each replica reduces its own shard of every leaf across all N inputs, reading S
// and writing S / N bytes. One uninterruptible barrier ends each collective, so no replica frees a buffer another still reads. Small collectives (up to
// kStagingBytes per replica) skip that barrier: each replica copies its inputs into its own
// double-buffered staging area before the rendezvous, and after it computes its own outputs from
// the staged copies, which stay untouched until the collective after next.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "collective/rendezvous.h"
#include "collective/communicator.h"

namespace distribute::collective::cpu {

class CpuCommunicator final : public Communicator {
 public:
  static constexpr std::size_t kStagingBytes = 4096;
  // The unit of work of all_reduce: claimed by one replica, reduced across all inputs while it
  // sits in L2, then written to every output. Large enough for few claims and long runs for the
  // prefetchers, small enough to stay in L2; small collectives use smaller chunks anyway.
  static constexpr std::size_t kChunkBytes = 64 * 1024;

  CpuCommunicator(int size, detail::WaitPolicy policy);
  std::string_view name() const override { return "SharedMemoryAllReduce"; }
  CommunicationImplementation implementation() const override { return CommunicationImplementation::kRing; }
  bool shares_host_memory() const override { return true; }
  void stage(int rank, CollectiveOp& op) override;
  void all_reduce(int rank, std::span<CollectiveOp* const> ops) override;
  void all_gather(int rank, std::span<CollectiveOp* const> ops) override;
  void reduce_scatter(int rank, std::span<CollectiveOp* const> ops) override;

 private:
  // Where rank's inputs to `op` were staged (the buffer of op.sequence's parity).
  const std::byte* staged_inputs(int rank, const CollectiveOp& op) const;

  Rendezvous done_;
  // Replica r's next all_reduce chunk, counted from the start of its share; 0 between
  // collectives. One cache line each: a shared counter would move between cores once per chunk.
  struct alignas(64) ChunkCursor {
    std::atomic<std::size_t> next{0};
  };
  std::unique_ptr<ChunkCursor[]> cursors_;
  struct alignas(64) Scratch {  // a replica's reduced chunk on its way to streaming stores
    std::byte bytes[kChunkBytes];
  };
  std::unique_ptr<Scratch[]> scratch_;
  struct alignas(64) Staging {
    std::byte bytes[2][kStagingBytes];
  };
  std::unique_ptr<Staging[]> staging_;
};

}  // namespace distribute::collective::cpu
