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
    if (storage_ != nullptr) release(storage_, 1);
  }

  Storage* get() const { return storage_; }
  Storage* operator->() const { return storage_; }
  explicit operator bool() const { return storage_ != nullptr; }
  friend bool operator==(const StorageRef& a, const StorageRef& b) { return a.storage_ == b.storage_; }

 private:
  friend class TensorViews;
  // Takes over a reference counted before (by TensorViews, which counts many at once).
  explicit StorageRef(Storage* storage) : storage_(storage) {}
  static void acquire(Storage* storage, std::int64_t count) {
    storage->refs_.fetch_add(count, std::memory_order_relaxed);
  }
  static void release(Storage* storage, std::int64_t count) {
    // acq_rel: every use of the memory through other references happens before the delete.
    if (storage->refs_.fetch_sub(count, std::memory_order_acq_rel) == count) delete storage;
  }

  Storage* storage_ = nullptr;
};

// Allocates nbytes on `device` (64-byte aligned on the host). Throws UnimplementedError for a
// device type whose backend is not built, InternalError when memory runs out.
StorageRef allocate_storage(const Device& device, std::size_t nbytes);

// Copies nbytes between two storages' pointers, whatever devices they are on.
void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                std::size_t nbytes);

}  // namespace distribute::detail
