// distribute::detail: a replica's device as the collective backends drive it. Work issued through
// a ReplicaDevice runs in issue order (on the host: at once; on a GPU: on the replica's own CUDA
// stream), and two markers order it against other replicas without blocking a thread: a replica
// marks its inputs ready before a collective and its reads done after, and a peer waits on the
// marks. The reduction-to-one-device backend is written against this interface only, so the same
// code runs, and is tested, on CPU replicas.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "distribute/device/reduce_op.h"
#include "base/wait.h"
#include "distribute/device/device.h"
#include "distribute/device/dtype.h"

struct CUstream_st;

namespace distribute::detail {

// What orders one async collective against its replica's work (ReplicaDevice::issue_async_call).
class AsyncCallOrder {
 public:
  virtual ~AsyncCallOrder() = default;
};

class ReplicaDevice {
 public:
  // Host replicas for CPU devices; GPU replicas own a new stream (UnimplementedError without CUDA).
  static std::unique_ptr<ReplicaDevice> create(const Device& device);
  virtual ~ReplicaDevice() = default;

  const Device& device() const { return device_; }
  // Replicas with equal memory spaces read each other's memory directly (-1: host; else the
  // physical GPU).
  int memory_space() const { return memory_space_; }
  // The replica's CUDA stream (on its async lane's thread, its communication stream); null on
  // the host.
  virtual CUstream_st* stream() const { return nullptr; }

  // Called on the replica's own thread before its first job: selects the GPU and makes the
  // stream this thread's current one. unbind_thread() undoes both (for replicas that borrow the
  // caller's thread, as OneDeviceStrategy's does for the length of a run).
  virtual void bind_thread() {}
  virtual void unbind_thread() {}

  enum class SyncResult { kDone, kCancelled, kTimedOut };
  // Waits until the work issued on the calling thread's stream (stream()) has finished, giving up
  // when `cancelled()` turns true or the deadline passes. Throws the device's own failure.
  virtual SyncResult synchronize(Deadline /*deadline*/, const std::function<bool()>& /*cancelled*/) {
    return SyncResult::kDone;
  }

  // Work in issue order. Pointers may be on any device of the strategy.
  virtual void copy(void* dst, const void* src, std::size_t nbytes) = 0;
  // `rows` rows of `row_bytes` from src (rows `src_pitch` apart) to dst (rows `dst_pitch` apart).
  virtual void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t row_bytes, std::size_t rows) = 0;
  // out = op over inputs (all in this device's memory space), as detail::reduce_buffers.
  virtual void reduce(DType dtype, ReduceOp op, std::span<const void* const> inputs, void* out, std::int64_t count,
                      std::int64_t mean_denominator) = 0;

  // Collectives issued without waiting (ReplicaContext::*_async) run on the replica's async lane.
  // On a GPU their work goes on a communication stream of the replica's own: it starts after the
  // work issued before the call (no host wait), and the replica's stream waits for it only where
  // the result is used, so that the collective overlaps the replica's work in between. On the
  // host these do nothing: the lane's thread runs the work in order.
  //
  // On the replica's thread as it issues the call: marks the call's inputs ready. Null when
  // there is nothing to order.
  virtual std::shared_ptr<AsyncCallOrder> issue_async_call() { return nullptr; }
  // On the lane's thread before its first job: selects the GPU; work issued through this device
  // from that thread (and its allocations) goes on the communication stream.
  virtual void bind_lane_thread() {}
  // On the lane: the call's work waits for its inputs; then, after the work, marks it done.
  virtual void begin_async_call(AsyncCallOrder& /*order*/) {}
  virtual void end_async_call(AsyncCallOrder& /*order*/) {}
  // The replica's later work waits for the call (its result is used from here on).
  virtual void use_async_result(AsyncCallOrder& /*order*/) {}
  // The replica's later work waits for every call the lane has run (the lane is idle).
  virtual void join_async_calls() {}

  enum class Mark { kReady, kDone };
  // Marks everything issued so far; a later wait_for(mark, *this) by a peer waits for it.
  virtual void mark(Mark /*mark*/) {}
  // Work issued after this waits for `other`'s last `mark`.
  virtual void wait_for(Mark /*mark*/, ReplicaDevice& /*other*/) {}

 protected:
  ReplicaDevice(Device device, int memory_space) : device_(std::move(device)), memory_space_(memory_space) {}

 private:
  Device device_;
  int memory_space_;
};

// Waits for `device`'s issued work (before merge_fn reads the replicas' values on one thread, at
// the end of a run). Throws AbortedError when `cancelled()` turns true first, DeadlineExceededError
// when the timeout passes first, both naming `rank` and `what`.
void wait_for_device_work(ReplicaDevice& device, int rank, std::chrono::duration<double> timeout,
                          const std::function<bool()>& cancelled, const std::string& what);

namespace gpu {
// The CUDA ReplicaDevice (cuda/runtime.cc, or a throwing stub without CUDA: no_gpu_runtime.cc).
std::unique_ptr<ReplicaDevice> create_replica_device(const Device& gpu);
}  // namespace gpu

}  // namespace distribute::detail
