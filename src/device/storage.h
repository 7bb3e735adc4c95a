// distribute::detail: the memory behind a Tensor. A Storage owns (or borrows) one block on one
// device and gives it back through its release function; device backends make them (the host
// pool in host_allocator.cc, the CUDA runtime). The reference count lives in the Storage (as in
// TF's TensorBuffer), so a handle (StorageRef, tensor.h) is one pointer, and the outputs of a
// collective, many views of one block, take all their references with one atomic add.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "distribute/device/tensor.h"

namespace distribute::detail {

class Storage {
 public:
  using Release = std::function<void(void* data, std::size_t nbytes)>;
  // Where set, called instead of `delete` when the last reference goes: the allocator keeps the
  // Storage, block and all, for a later request (see reuse()).
  using Recycle = void (*)(Storage* storage);

  // `block`: the Storage whose memory this one shows (see alias_storage); null for its own.
  Storage(void* data, std::size_t nbytes, Device device, Release release, const Storage* block = nullptr)
      : data_(data), nbytes_(nbytes), device_(std::move(device)), release_(std::move(release)), block_(block) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (release_) release_(data_, nbytes_);
  }

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  const Device& device() const { return device_; }
  // The Storage that owns the memory: this one, or the one an alias shows. Tensor::same_storage
  // compares these.
  const Storage* block() const { return block_ != nullptr ? block_ : this; }

  void set_recycle(Recycle recycle) { recycle_ = recycle; }
  // A recycled Storage made new again, on `device`, with one reference for the StorageRef that
  // adopts it.
  void reuse(const Device& device) {
    refs_.store(1, std::memory_order_relaxed);
    device_ = device;
  }

 private:
  friend class StorageRef;
  // After the last reference went.
  static void dispose(Storage* storage) {
    if (storage->recycle_ != nullptr) {
      storage->recycle_(storage);
    } else {
      delete storage;
    }
  }

  std::atomic<std::int64_t> refs_{1};  // the StorageRef made with it holds the first
  void* data_;
  std::size_t nbytes_;
  Device device_;
  Release release_;
  const Storage* block_;
  Recycle recycle_ = nullptr;
};

// A new Storage of `nbytes` at `data` on `device`, given back through `release` (none: borrowed).
StorageRef make_storage(void* data, std::size_t nbytes, Device device, Storage::Release release);

// A Storage of the memory of `of` that reports `device` and holds a reference to `of` while it
// lives. For host memory seen as another CPU device's (one address space serves every CPU).
StorageRef alias_storage(const StorageRef& of, Device device);

// Allocates nbytes on `device` (64-byte aligned on the host). Throws UnimplementedError for a
// device type whose backend is not built, InternalError when memory runs out.
StorageRef allocate_storage(const Device& device, std::size_t nbytes);

// While one lives, the references this thread drops are counted on the thread and given back to
// their Storage together: when the thread drops a reference to another Storage, when the batch
// ends, or at once when they are the Storage's last. A replica's thread runs each step in one,
// so a gradient list's output handles (views of one block, dropped one after the other) cost one
// atomic update, not one each. Memory whose last holder is another thread may then wait for the
// end of the step to be freed.
class ReleaseBatch {
 public:
  ReleaseBatch();
  ReleaseBatch(const ReleaseBatch&) = delete;
  ReleaseBatch& operator=(const ReleaseBatch&) = delete;
  ~ReleaseBatch();

 private:
  bool outer_;
};

}  // namespace distribute::detail
