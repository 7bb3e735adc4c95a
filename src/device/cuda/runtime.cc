// The CUDA runtime behind GPU tensors and GPU replicas.
//
// Streams. Each GPU replica owns a blocking CUDA stream (created once with its strategy) and its
// thread makes it current when it starts. Everything a replica does on its GPU - allocations,
// copies, collectives, the user's own kernels through cuda::current_stream() - is ordered on that
// stream. Threads that are not replicas use the device's legacy default stream, which CUDA
// orders against every blocking stream of the device; so a tensor moved or printed from the main
// thread after run, or inside merge_fn, sees the replicas' finished work.
//
// Async collectives. A replica's async lane issues their work on the replica's communication
// stream, a second blocking stream: an event recorded on the replica's stream as the call is
// issued starts it, and an event recorded after it is what the replica's stream waits for when the
// result is used (or the lane is drained). Memory the lane allocates is on the communication stream;
// when such a block is freed by another thread (a result the replica has read), the communication
// stream first waits for the replica's stream, so that the block is not reused under its reads.
//
// Memory. Allocations are stream-ordered (cudaMallocAsync) from the device's default pool, whose
// release threshold is raised so that freed blocks stay in the pool: a training loop does not call
// the driver's allocator per step. A block is freed on the stream it was allocated on; the storage
// holds that stream, so the stream outlives every tensor allocated on it.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "device/cuda/cuda_error.h"
#include "device/cuda/reduce_kernel.h"
#include "device/cuda/update_kernels.h"
#include "device/gpu_runtime.h"
#include "device/gpu_topology.h"
#include "device/replica_device.h"
#include "distribute/device/gpu.h"
#include "distribute/errors.h"

namespace distribute::detail::gpu {
namespace {

static_assert(static_cast<int>(DType::kBFloat16) == static_cast<int>(KernelDType::kBFloat16) &&
              static_cast<int>(DType::kFloat16) == static_cast<int>(KernelDType::kFloat16) &&
              static_cast<int>(DType::kInt64) == static_cast<int>(KernelDType::kInt64));

// Makes `physical` the thread's current device for a scope, and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int physical) {
    DISTRIBUTE_CUDA_CHECK(cudaGetDevice(&previous_), "querying the current GPU");
    if (previous_ == physical) {
      previous_ = -1;
    } else {
      DISTRIBUTE_CUDA_CHECK(cudaSetDevice(physical), "selecting physical GPU ", physical);
    }
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// cudaFreeAsync on `physical` from any thread; it runs in storage release, so it cannot throw.
void free_on(int physical, void* block, cudaStream_t stream) {
  int previous = -1;
  cudaGetDevice(&previous);
  if (previous != physical) cudaSetDevice(physical);
  cudaFreeAsync(block, stream);
  if (previous >= 0 && previous != physical) cudaSetDevice(previous);
}

struct DeviceCount {
  int count = 0;
  std::string reason;
};

const DeviceCount& device_count() {
  static const DeviceCount result = [] {
    DeviceCount out;
    const cudaError_t error = cudaGetDeviceCount(&out.count);
    if (error != cudaSuccess) {
      out.count = 0;
      out.reason = cuda_error_message(error, "cudaGetDeviceCount failed");
      cudaGetLastError();  // not sticky: clear it so later calls do not report it again
    } else if (out.count == 0) {
      out.reason = "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
    }
    return out;
  }();
  return result;
}

// Keeps freed blocks in each device's pool instead of returning them to the driver.
void configure_pool(int physical) {
  struct Configured {
    Mutex mu;
    std::vector<bool> done ABSL_GUARDED_BY(mu);
  };
  static Configured* configured = new Configured();
  MutexLock lock(configured->mu);
  std::vector<bool>& done = configured->done;
  if (done.size() <= static_cast<std::size_t>(physical)) done.resize(static_cast<std::size_t>(physical) + 1);
  if (done[static_cast<std::size_t>(physical)]) return;
  cudaMemPool_t pool;
  DISTRIBUTE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, physical), "getting the memory pool of physical GPU ",
                        physical);
  std::uint64_t threshold = UINT64_MAX;
  DISTRIBUTE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
                        "configuring the memory pool of physical GPU ", physical);
  done[static_cast<std::size_t>(physical)] = true;
}

// Bytes held per logical GPU, for LogicalDeviceConfiguration::memory_limit.
std::atomic<std::size_t>& bytes_in_use(const Device& gpu) {
  static const int n = gpu_topology().num_logical();
  static const auto counters = std::make_unique<std::atomic<std::size_t>[]>(static_cast<std::size_t>(std::max(n, 1)));
  return counters[static_cast<std::size_t>(gpu.index())];
}

// A replica's stream, shared with every storage allocated on it, and the blocks of up to
// kMaxKeptBlock bytes freed on it, kept for its next allocations of the same size. Stream order
// makes that reuse safe, as a cudaFreeAsync and a cudaMallocAsync on the stream would be, and it
// spares each collective output the two pool calls, which a small collective would notice
// (docs/performance.md). Larger blocks go back to the pool, where their transfers hide the calls;
// an allocation that fails frees the kept blocks and tries again.
struct Stream {
  static constexpr std::size_t kMaxKeptBlock = std::size_t{32} << 20;
  static constexpr std::size_t kMaxKeptBytes = std::size_t{64} << 20;

  Stream(int physical_gpu, cudaStream_t s, std::shared_ptr<Stream> replica = nullptr)
      : physical(physical_gpu), stream(s), follows(std::move(replica)) {
    if (follows) cudaEventCreateWithFlags(&follow_event, cudaEventDisableTiming);
  }
  ~Stream() {
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(physical);
    release_kept();
    cudaStreamDestroy(stream);  // pending work still completes
    if (follow_event != nullptr) cudaEventDestroy(follow_event);
    if (previous >= 0) cudaSetDevice(previous);
  }

  // A communication stream: its later work waits for the replica stream's work issued so far.
  // Runs in storage release, so it cannot throw.
  void wait_for_replica() {
    MutexLock lock(mu);
    if (cudaEventRecord(follow_event, follows->stream) == cudaSuccess) cudaStreamWaitEvent(stream, follow_event, 0);
  }

  // A kept block of exactly `nbytes`, or null.
  void* take(std::size_t nbytes) {
    if (nbytes > kMaxKeptBlock) return nullptr;
    MutexLock lock(mu);
    auto it = kept.find(nbytes);
    if (it == kept.end() || it->second.empty()) return nullptr;
    void* block = it->second.back();
    it->second.pop_back();
    kept_bytes -= nbytes;
    return block;
  }
  // Keeps a freed block for reuse; false when it is large or the stream keeps enough already.
  bool keep(void* block, std::size_t nbytes) {
    if (nbytes > kMaxKeptBlock) return false;
    MutexLock lock(mu);
    if (kept_bytes + nbytes > kMaxKeptBytes) return false;
    kept[nbytes].push_back(block);
    kept_bytes += nbytes;
    return true;
  }
  // Frees every kept block on the stream (when an allocation fails, and at the end).
  void release_kept() {
    MutexLock lock(mu);
    for (auto& [nbytes, blocks] : kept) {
      for (void* block : blocks) cudaFreeAsync(block, stream);
    }
    kept.clear();
    kept_bytes = 0;
  }

  const int physical;
  const cudaStream_t stream;
  const std::shared_ptr<Stream> follows;  // a communication stream's replica stream, else null
  cudaEvent_t follow_event = nullptr;
  Mutex mu;
  absl::flat_hash_map<std::size_t, absl::InlinedVector<void*, 2>> kept ABSL_GUARDED_BY(mu);
  std::size_t kept_bytes ABSL_GUARDED_BY(mu) = 0;
};

class CudaReplicaDevice;
thread_local CudaReplicaDevice* bound_replica = nullptr;
// On an async lane's thread, the communication stream it issues on.
thread_local const Stream* lane_stream = nullptr;

// The events of one async collective: its inputs ready on the replica stream, its work done on
// the communication stream.
class CudaAsyncCallOrder final : public AsyncCallOrder {
 public:
  explicit CudaAsyncCallOrder(const Device& gpu) {
    DISTRIBUTE_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "creating an event on ",
                          gpu.short_name());
    if (cudaError_t error = cudaEventCreateWithFlags(&done, cudaEventDisableTiming); error != cudaSuccess) {
      cudaEventDestroy(ready);
      throw_cuda_error(error, absl::StrCat("creating an event on ", gpu.short_name()));
    }
  }
  ~CudaAsyncCallOrder() override {
    cudaEventDestroy(ready);
    cudaEventDestroy(done);
  }
  cudaEvent_t ready = nullptr;
  cudaEvent_t done = nullptr;
};

class CudaReplicaDevice final : public ReplicaDevice {
 public:
  CudaReplicaDevice(const Device& gpu, int physical) : ReplicaDevice(gpu, physical) {
    DeviceGuard guard(physical);
    cudaStream_t s = nullptr;
    DISTRIBUTE_CUDA_CHECK(cudaStreamCreate(&s), "creating the stream of the replica on ", gpu.short_name());
    stream_ = std::make_shared<Stream>(physical, s);
    cudaStream_t c = nullptr;
    DISTRIBUTE_CUDA_CHECK(cudaStreamCreate(&c), "creating the communication stream of the replica on ",
                          gpu.short_name());
    communication_ = std::make_shared<Stream>(physical, c, stream_);
    for (cudaEvent_t* event : {&events_[0], &events_[1], &joined_}) {
      DISTRIBUTE_CUDA_CHECK(cudaEventCreateWithFlags(event, cudaEventDisableTiming), "creating an event on ",
                            gpu.short_name());
    }
  }
  ~CudaReplicaDevice() override {
    if (bound_replica == this) bound_replica = nullptr;
    cudaEventDestroy(events_[0]);
    cudaEventDestroy(events_[1]);
    cudaEventDestroy(joined_);
  }

  // The stream this thread issues on: the communication stream on the replica's async lane.
  const std::shared_ptr<Stream>& shared_stream() const {
    return lane_stream == communication_.get() ? communication_ : stream_;
  }
  CUstream_st* stream() const override { return shared_stream()->stream; }

  void bind_lane_thread() override {
    DISTRIBUTE_CUDA_CHECK(cudaSetDevice(memory_space()), "binding the async lane of ", device().short_name(),
                          " to physical GPU ", memory_space());
    bound_replica = this;
    lane_stream = communication_.get();
  }

  std::shared_ptr<AsyncCallOrder> issue_async_call() override {
    auto order = std::make_shared<CudaAsyncCallOrder>(device());
    DISTRIBUTE_CUDA_CHECK(cudaEventRecord(order->ready, stream_->stream), "recording an event on ",
                          device().short_name());
    return order;
  }
  void begin_async_call(AsyncCallOrder& order) override {
    DISTRIBUTE_CUDA_CHECK(cudaStreamWaitEvent(communication_->stream, static_cast<CudaAsyncCallOrder&>(order).ready, 0),
                          "ordering the communication stream of ", device().short_name());
  }
  void end_async_call(AsyncCallOrder& order) override {
    DISTRIBUTE_CUDA_CHECK(cudaEventRecord(static_cast<CudaAsyncCallOrder&>(order).done, communication_->stream),
                          "recording an event on ", device().short_name());
  }
  void use_async_result(AsyncCallOrder& order) override {
    DISTRIBUTE_CUDA_CHECK(cudaStreamWaitEvent(stream_->stream, static_cast<CudaAsyncCallOrder&>(order).done, 0),
                          "ordering the stream of ", device().short_name(), " after its async collective");
  }
  void join_async_calls() override {
    DISTRIBUTE_CUDA_CHECK(cudaEventRecord(joined_, communication_->stream), "recording an event on ",
                          device().short_name());
    DISTRIBUTE_CUDA_CHECK(cudaStreamWaitEvent(stream_->stream, joined_, 0), "ordering the stream of ",
                          device().short_name(), " after its async collectives");
  }

  void bind_thread() override {
    DISTRIBUTE_CUDA_CHECK(cudaGetDevice(&previous_device_), "querying the current GPU");
    DISTRIBUTE_CUDA_CHECK(cudaSetDevice(memory_space()), "binding the replica thread of ", device().short_name(),
                          " to physical GPU ", memory_space());
    previous_replica_ = bound_replica;
    bound_replica = this;
  }

  void unbind_thread() override {
    if (bound_replica != this) return;
    bound_replica = previous_replica_;
    cudaSetDevice(previous_device_);
  }

  SyncResult synchronize(Deadline deadline, const std::function<bool()>& cancelled) override {
    bool was_cancelled = false;
    const bool ended = poll_until(
        [&] {
          const cudaError_t state = cudaStreamQuery(stream());
          if (state == cudaSuccess) return true;
          if (state != cudaErrorNotReady) {
            throw_cuda_error(state, absl::StrCat("the work of the replica on ", device().short_name(), " failed"));
          }
          was_cancelled = cancelled();
          return was_cancelled;
        },
        deadline);
    if (!ended) return SyncResult::kTimedOut;
    return was_cancelled ? SyncResult::kCancelled : SyncResult::kDone;
  }

  void copy(void* dst, const void* src, std::size_t nbytes) override {
    if (nbytes == 0 || dst == src) return;
    DISTRIBUTE_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream()), "copying ", nbytes,
                          " bytes on the stream of ", device().short_name());
  }

  void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t row_bytes,
                 std::size_t rows) override {
    if (row_bytes == 0 || rows == 0) return;
    DISTRIBUTE_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDefault,
                                            stream()),
                          "copying ", rows, " rows of ", row_bytes, " bytes on the stream of ", device().short_name());
  }

  void reduce(DType dtype, ReduceOp op, std::span<const void* const> inputs, void* out, std::int64_t count,
              std::int64_t mean_denominator) override {
    DISTRIBUTE_CUDA_CHECK(launch_reduce(static_cast<KernelDType>(dtype), op == ReduceOp::kMean, inputs.data(),
                                        inputs.size(), out, count, mean_denominator, stream()),
                          "reducing ", inputs.size(), " buffers of ", count, " ", dtype_name(dtype), " on ",
                          device().short_name());
  }

  void mark(Mark mark) override {
    DISTRIBUTE_CUDA_CHECK(cudaEventRecord(events_[static_cast<int>(mark)], stream()), "recording an event on ",
                          device().short_name());
  }

  void wait_for(Mark mark, ReplicaDevice& other) override {
    auto& peer = static_cast<CudaReplicaDevice&>(other);
    DISTRIBUTE_CUDA_CHECK(cudaStreamWaitEvent(stream(), peer.events_[static_cast<int>(mark)], 0),
                          "ordering the stream of ", device().short_name(), " after ", other.device().short_name());
  }

 private:
  std::shared_ptr<Stream> stream_;
  std::shared_ptr<Stream> communication_;
  cudaEvent_t events_[2] = {nullptr, nullptr};
  cudaEvent_t joined_ = nullptr;  // join_async_calls's, used on the replica's thread only
  int previous_device_ = 0;                     // the thread's device before bind_thread
  CudaReplicaDevice* previous_replica_ = nullptr;  // likewise, its bound replica
};

// The stream for work on `physical` from this thread: the bound replica's when it is on that GPU,
// else the legacy default stream (with the device selected by the caller's guard).
std::shared_ptr<Stream> stream_for(int physical) {
  if (bound_replica != nullptr && bound_replica->memory_space() == physical) return bound_replica->shared_stream();
  return nullptr;
}

}  // namespace

bool built() { return true; }
int physical_device_count() { return device_count().count; }
std::string unavailable_reason() { return device_count().reason; }

std::string pci_bus_id(int physical) {
  char id[32] = {};
  DISTRIBUTE_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, physical), "querying the PCI bus id of a GPU");
  return id;
}

StorageRef allocate(const Device& gpu, std::size_t nbytes) {
  const int physical = gpu_topology().physical_of(gpu);
  if (nbytes == 0) return make_storage(nullptr, 0, gpu, nullptr);
  const std::size_t limit = gpu_topology().memory_limit(gpu);
  std::atomic<std::size_t>& in_use = bytes_in_use(gpu);
  const std::size_t before = in_use.fetch_add(nbytes, std::memory_order_relaxed);
  if (limit != 0 && before + nbytes > limit) {
    in_use.fetch_sub(nbytes, std::memory_order_relaxed);
    throw ResourceExhaustedError(absl::StrCat("allocating ", nbytes, " bytes on ", gpu.short_name(), " would exceed its ",
                                              "memory_limit of ", limit, " bytes (", before,
                                              " in use); free tensors or raise the limit"));
  }
  try {
    std::shared_ptr<Stream> stream = stream_for(physical);
    const cudaStream_t s = stream ? stream->stream : cudaStreamLegacy;
    void* data = stream ? stream->take(nbytes) : nullptr;
    if (data == nullptr) {
      DeviceGuard guard(physical);
      configure_pool(physical);
      cudaError_t error = cudaMallocAsync(&data, nbytes, s);
      if (error == cudaErrorMemoryAllocation && stream) {  // what this stream keeps may be what is missing
        cudaGetLastError();
        stream->release_kept();
        error = cudaMallocAsync(&data, nbytes, s);
      }
      DISTRIBUTE_CUDA_CHECK(error, "allocating ", nbytes, " bytes on ", gpu.short_name());
    }
    return make_storage(data, nbytes, gpu, [stream, s, physical, &in_use](void* p, std::size_t n) {
      if (stream && stream->follows && lane_stream != stream.get()) {
        int previous = -1;
        cudaGetDevice(&previous);
        if (previous != physical) cudaSetDevice(physical);
        stream->wait_for_replica();
        if (previous >= 0 && previous != physical) cudaSetDevice(previous);
      }
      if (!stream || !stream->keep(p, n)) free_on(physical, p, s);
      in_use.fetch_sub(n, std::memory_order_relaxed);
    });
  } catch (...) {
    in_use.fetch_sub(nbytes, std::memory_order_relaxed);
    throw;
  }
}

void copy(void* dst, const Device& dst_device, const void* src, const Device& src_device, std::size_t nbytes) {
  const Device& gpu = dst_device.is_gpu() ? dst_device : src_device;
  const int physical = gpu_topology().physical_of(gpu);
  if (dst_device.is_gpu() && src_device.is_gpu()) gpu_topology().physical_of(src_device);
  if (nbytes == 0 || dst == src) return;
  // A replica orders copies on its own GPU on its own stream. Any other copy goes on the GPU's
  // legacy stream (ordered after every replica stream of that GPU) and is waited for, so that a
  // replica's later work on its own stream sees it.
  const bool on_replica = bound_replica != nullptr && bound_replica->memory_space() == physical;
  DeviceGuard guard(physical);
  const cudaStream_t s = on_replica ? bound_replica->stream() : cudaStreamLegacy;
  DISTRIBUTE_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s), "copying ", nbytes, " bytes from ",
                        src_device.short_name(), " to ", dst_device.short_name());
  if (dst_device.is_cpu() || (!on_replica && bound_replica != nullptr)) {
    DISTRIBUTE_CUDA_CHECK(cudaStreamSynchronize(s), "copying ", nbytes, " bytes from ", src_device.short_name(),
                          " to ", dst_device.short_name());
  }
}

void fill_zero(void* data, const Device& gpu, std::size_t nbytes) {
  const int physical = gpu_topology().physical_of(gpu);
  if (nbytes == 0) return;
  DeviceGuard guard(physical);
  std::shared_ptr<Stream> stream = stream_for(physical);
  DISTRIBUTE_CUDA_CHECK(cudaMemsetAsync(data, 0, nbytes, stream ? stream->stream : cudaStreamLegacy), "zeroing ",
                        nbytes, " bytes on ", gpu.short_name());
}

namespace {

// Enqueues launch(stream) on the calling replica's stream when the replica is on `gpu`'s physical
// GPU; elsewhere on the legacy default stream, and waits for it. `what` names the work in errors.
template <class Launch, class... What>
void launch_ordered(const Device& gpu, Launch&& launch, const What&... what) {
  const int physical = gpu_topology().physical_of(gpu);
  const bool on_replica = bound_replica != nullptr && bound_replica->memory_space() == physical;
  DeviceGuard guard(physical);
  const cudaStream_t s = on_replica ? bound_replica->stream() : cudaStreamLegacy;
  DISTRIBUTE_CUDA_CHECK(launch(s), what..., " on ", gpu.short_name());
  if (!on_replica) DISTRIBUTE_CUDA_CHECK(cudaStreamSynchronize(s), what..., " on ", gpu.short_name());
}

}  // namespace

void reduce(DType dtype, ReduceOp op, std::span<const void* const> inputs, void* out, std::int64_t count,
            std::int64_t mean_denominator, const Device& gpu) {
  if (count == 0) return;
  launch_ordered(
      gpu,
      [&](cudaStream_t s) {
        return launch_reduce(static_cast<KernelDType>(dtype), op == ReduceOp::kMean, inputs.data(), inputs.size(), out,
                             count, mean_denominator, s);
      },
      "reducing ", inputs.size(), " buffers of ", count, " ", dtype_name(dtype));
}

void subtract(DType dtype, void* dst, const void* src, std::int64_t count, const Device& gpu) {
  if (count == 0) return;
  launch_ordered(
      gpu, [&](cudaStream_t s) { return launch_subtract(static_cast<KernelDType>(dtype), dst, src, count, s); },
      "subtracting ", count, " ", dtype_name(dtype));
}

void sgd_step(DType dtype, void* w, const void* g, void* m, std::int64_t count, double learning_rate, double momentum,
              bool nesterov, const Device& gpu) {
  if (count == 0) return;
  launch_ordered(
      gpu,
      [&](cudaStream_t s) {
        return launch_sgd(static_cast<KernelDType>(dtype), w, g, m, count, learning_rate, momentum, nesterov, s);
      },
      "an SGD step over ", count, " ", dtype_name(dtype));
}

void adam_step(DType dtype, void* w, const void* g, void* m, void* v, std::int64_t count,
               const std::int64_t* steps_before, double learning_rate, double beta_1, double beta_2, double epsilon,
               const Device& gpu) {
  if (count == 0) return;
  launch_ordered(
      gpu,
      [&](cudaStream_t s) {
        return launch_adam(static_cast<KernelDType>(dtype), w, g, m, v, count, steps_before, learning_rate, beta_1,
                           beta_2, epsilon, s);
      },
      "an Adam step over ", count, " ", dtype_name(dtype));
}

void increment(std::int64_t* counter, const Device& gpu) {
  launch_ordered(
      gpu, [&](cudaStream_t s) { return launch_increment(counter, s); }, "counting a step");
}

void synchronize_bound_stream() {
  if (bound_replica == nullptr) return;
  DISTRIBUTE_CUDA_CHECK(cudaStreamSynchronize(bound_replica->stream()), "waiting for the work of the replica on ",
                        bound_replica->device().short_name());
}

std::unique_ptr<ReplicaDevice> create_replica_device(const Device& gpu) {
  return std::make_unique<CudaReplicaDevice>(gpu, gpu_topology().physical_of(gpu));
}

}  // namespace distribute::detail::gpu

namespace distribute::cuda {

CUstream_st* current_stream() {
  return detail::gpu::bound_replica != nullptr ? detail::gpu::bound_replica->stream() : cudaStreamLegacy;
}

}  // namespace distribute::cuda
