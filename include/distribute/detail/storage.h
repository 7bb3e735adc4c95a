// distribute::detail: the memory behind a Tensor. A Storage owns (or borrows) one block on one
// device and gives it back through its release function. Device backends provide allocators;
// the host one (host_allocator.h) keeps freed blocks for reuse so that a training loop does not
// allocate or page-fault per step.
//
// Tensors hold a StorageRef: the reference count lives in the Storage (as in TF's TensorBuffer),
// so a handle is one pointer, and the outputs of a collective, many views of one block, can take
// all their references with one atomic add (TensorViews in tensor.h) instead of one per tensor.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "distribute/device/device.h"

namespace distribute::detail {

class TensorViews;
class Storage;

// This thread's dropped references not yet given back (see ReleaseBatch): `count` of them, all
// to `storage`.
struct DeferredReleases {
  bool active = false;
  Storage* storage = nullptr;
  std::int64_t count = 0;
};
extern thread_local constinit DeferredReleases deferred_releases;  // constinit: no init check per access

class Storage {
 public:
  using Release = std::function<void(void* data, std::size_t nbytes)>;

  Storage(void* data, std::size_t nbytes, Device device, Release release)
      : data_(data), nbytes_(nbytes), device_(std::move(device)), release_(std::move(release)) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (release_) release_(data_, nbytes_);
  }

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  const Device& device() const { return device_; }

 private:
  friend class StorageRef;
  std::atomic<std::int64_t> refs_{1};  // the StorageRef that made it holds the first
  void* data_;
  std::size_t nbytes_;
  Device device_;
  Release release_;
};

// A counted reference to a Storage; null by default. Copies share the Storage, which is deleted
// with its last reference.
class StorageRef {
 public:
  StorageRef() = default;
  static StorageRef make(void* data, std::size_t nbytes, Device device, Storage::Release release) {
    return StorageRef(new Storage(data, nbytes, std::move(device), std::move(release)));
  }
  StorageRef(const StorageRef& other) noexcept : storage_(other.storage_) {
    if (storage_ != nullptr) storage_->refs_.fetch_add(1, std::memory_order_relaxed);
  }
  StorageRef(StorageRef&& other) noexcept : storage_(std::exchange(other.storage_, nullptr)) {}
  StorageRef& operator=(StorageRef other) noexcept {
    std::swap(storage_, other.storage_);
    return *this;
  }
  ~StorageRef() {
    if (storage_ != nullptr) drop(storage_);
  }

  Storage* get() const { return storage_; }
  Storage* operator->() const { return storage_; }
  explicit operator bool() const { return storage_ != nullptr; }
  friend bool operator==(const StorageRef& a, const StorageRef& b) { return a.storage_ == b.storage_; }

 private:
  friend class TensorViews;
  friend class ReleaseBatch;
  // Takes over a reference counted before (by TensorViews, which counts many at once).
  explicit StorageRef(Storage* storage) : storage_(storage) {}
  static void drop(Storage* storage) {
    DeferredReleases& deferred = deferred_releases;
    if (!deferred.active) {
      release(storage, 1);
      return;
    }
    if (deferred.storage != storage) {
      give_back(deferred);
      deferred.storage = storage;
    }
    ++deferred.count;
    // Every reference left is one this thread dropped: no holder is left to take another, so the
    // block goes now, not at the end of the batch. acquire: pairs with other holders' releases.
    if (storage->refs_.load(std::memory_order_acquire) == deferred.count) {
      deferred = {true, nullptr, 0};
      delete storage;
    }
  }
  static void give_back(DeferredReleases& deferred) {
    if (deferred.storage == nullptr) return;
    Storage* storage = std::exchange(deferred.storage, nullptr);
    release(storage, std::exchange(deferred.count, 0));
  }
  static void acquire(Storage* storage, std::int64_t count) {
    storage->refs_.fetch_add(count, std::memory_order_relaxed);
  }
  static void release(Storage* storage, std::int64_t count) {
    // acq_rel: every use of the memory through other references happens before the delete.
    if (storage->refs_.fetch_sub(count, std::memory_order_acq_rel) == count) delete storage;
  }

  Storage* storage_ = nullptr;
};

// While one lives, the references this thread drops are counted on the thread and given back to
// their Storage together: when the thread drops a reference to another Storage, when the batch
// ends, or at once when they are the Storage's last. A replica's thread runs each step in one,
// so a gradient list's output handles (views of one block, dropped one after the other) cost one
// atomic update, not one each. Memory whose last holder is another thread may then wait for the
// end of the step to be freed.
class ReleaseBatch {
 public:
  ReleaseBatch() : outer_(std::exchange(deferred_releases.active, true)) {}
  ReleaseBatch(const ReleaseBatch&) = delete;
  ReleaseBatch& operator=(const ReleaseBatch&) = delete;
  ~ReleaseBatch() {
    StorageRef::give_back(deferred_releases);
    deferred_releases.active = outer_;
  }

 private:
  bool outer_;
};

// Allocates nbytes on `device` (64-byte aligned on the host). Throws UnimplementedError for a
// device type whose backend is not built, InternalError when memory runs out.
StorageRef allocate_storage(const Device& device, std::size_t nbytes);

// Copies nbytes between two storages' pointers, whatever devices they are on.
void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                std::size_t nbytes);

}  // namespace distribute::detail
