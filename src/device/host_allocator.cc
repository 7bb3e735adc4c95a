// Host memory for tensors. Each logical CPU device has its own pool, so N replicas allocating their
// outputs at the same moment do not contend on one lock. A pool keeps freed blocks by exact size
// (no rounding, so an all_reduce of S bytes holds S bytes per replica) up to a cap, after which
// blocks go back to the system. In front of the pools, each thread keeps the last few small
// Storages (handle and block) it dropped: a replica that all_reduces a loss or a metric every step
// takes back the Storage of the step before without a lock or an allocation (host memory is one
// space, so any pool's block serves any device).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/mman.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "device/gpu_runtime.h"
#include "device/storage.h"
#include "distribute/errors.h"

namespace distribute::detail {
namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kMaxCachedBytesPerPool = std::size_t{1} << 30;

class HostPool {
 public:
  void* allocate(std::size_t nbytes) {
    {
      MutexLock lock(mu_);
      auto it = free_.find(nbytes);
      if (it != free_.end() && !it->second.empty()) {
        void* block = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= nbytes;
        return block;
      }
    }
    // Large blocks start on a huge-page boundary and ask for huge pages: a collective streams
    // through them, and 4 KiB pages would cost a TLB miss every 4 KiB.
    const std::size_t alignment = nbytes >= kHugePage ? kHugePage : kAlignment;
    const std::size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* block = nullptr;
    if (posix_memalign(&block, alignment, rounded) != 0) {
      throw InternalError(absl::StrCat("host allocation of ", nbytes, " bytes failed"));
    }
#if defined(MADV_HUGEPAGE)
    if (alignment == kHugePage) madvise(block, rounded, MADV_HUGEPAGE);
#endif
    return block;
  }

  void release(void* block, std::size_t nbytes) {
    {
      MutexLock lock(mu_);
      if (cached_bytes_ + nbytes <= kMaxCachedBytesPerPool) {
        free_[nbytes].push_back(block);
        cached_bytes_ += nbytes;
        return;
      }
    }
    std::free(block);
  }

 private:
  Mutex mu_;
  absl::flat_hash_map<std::size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);
  std::size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Pools live for the whole program (never destroyed), so a tensor released during static
// destruction still finds its pool. Each thread remembers the last pool it used: a replica thread
// allocates on its own device, so the registry's lock is taken once per thread and device.
HostPool& host_pool(int device_index) {
  thread_local int cached_index = -1;
  thread_local HostPool* cached_pool = nullptr;
  if (device_index == cached_index) return *cached_pool;
  struct Registry {
    Mutex mu;
    absl::flat_hash_map<int, HostPool*> pools ABSL_GUARDED_BY(mu);
  };
  static Registry* registry = new Registry();
  MutexLock lock(registry->mu);
  HostPool*& pool = registry->pools[device_index];
  if (pool == nullptr) pool = new HostPool();
  cached_index = device_index;
  cached_pool = pool;
  return *pool;
}

// The small host Storages (handle and block) whose last reference this thread dropped, newest at
// the back.
constexpr std::size_t kThreadCacheMaxBlockBytes = 1024;
constexpr int kThreadCacheBlocks = 8;
struct ThreadCache {
  Storage* storages[kThreadCacheBlocks] = {};
  int count = 0;
  bool flush_registered = false;
  bool closed = false;  // the thread is ending: Storages are deleted, their blocks go to their pools
};
// constinit and trivially destructible: usable at any point of the thread's end.
constinit thread_local ThreadCache thread_cache;

// Deletes the cached Storages when the thread ends (their blocks go back to their pools).
struct ThreadCacheFlush {
  ~ThreadCacheFlush() {
    ThreadCache& cache = thread_cache;
    cache.closed = true;
    for (int i = 0; i < cache.count; ++i) delete cache.storages[i];
    cache.count = 0;
  }
};

// Takes entry i out, keeping the others in order.
Storage* remove_at(ThreadCache& cache, int i) {
  Storage* storage = cache.storages[i];
  std::copy(cache.storages + i + 1, cache.storages + cache.count, cache.storages + i);
  --cache.count;
  return storage;
}

Storage* take_cached(std::size_t nbytes) {
  ThreadCache& cache = thread_cache;
  for (int i = cache.count - 1; i >= 0; --i) {
    if (cache.storages[i]->nbytes() == nbytes) return remove_at(cache, i);
  }
  return nullptr;
}

void recycle_small(Storage* storage) {
  ThreadCache& cache = thread_cache;
  if (cache.closed) {
    delete storage;
    return;
  }
  if (!cache.flush_registered) {
    thread_local ThreadCacheFlush flush;
    cache.flush_registered = true;
  }
  if (cache.count == kThreadCacheBlocks) delete remove_at(cache, 0);  // the oldest
  cache.storages[cache.count++] = storage;
}

}  // namespace

StorageRef allocate_storage(const Device& device, std::size_t nbytes) {
  if (device.is_gpu()) return gpu::allocate(device, nbytes);
  if (nbytes == 0) return make_storage(nullptr, 0, device, nullptr);
  HostPool* pool = &host_pool(device.index());
  if (nbytes <= kThreadCacheMaxBlockBytes) {
    if (Storage* cached = take_cached(nbytes)) {
      cached->reuse(device);
      return StorageRef::adopt(cached);
    }
  }
  void* block = pool->allocate(nbytes);
  StorageRef storage = make_storage(block, nbytes, device, [pool](void* data, std::size_t n) { pool->release(data, n); });
  if (nbytes <= kThreadCacheMaxBlockBytes) storage->set_recycle(&recycle_small);
  return storage;
}

void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                std::size_t nbytes) {
  if (dst_device.is_gpu() || src_device.is_gpu()) {
    gpu::copy(dst, dst_device, src, src_device, nbytes);
  } else if (nbytes != 0 && dst != src) {
    std::memcpy(dst, src, nbytes);
  }
}

}  // namespace distribute::detail
