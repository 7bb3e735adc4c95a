// distribute::detail: the memory behind a Tensor. A Storage owns (or borrows) one block on one
// device and gives it back through its release function. Device backends provide allocators;
// the host one (host_allocator.h) keeps freed blocks for reuse so that a training loop does not
// allocate or page-fault per step.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "distribute/device/device.h"

namespace distribute::detail {

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
  void* data_;
  std::size_t nbytes_;
  Device device_;
  Release release_;
};

// Allocates nbytes on `device` (64-byte aligned on the host). Throws UnimplementedError for a
// device type whose backend is not built, InternalError when memory runs out.
std::shared_ptr<Storage> allocate_storage(const Device& device, std::size_t nbytes);

// Copies nbytes between two storages' pointers, whatever devices they are on.
void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                std::size_t nbytes);

}  // namespace distribute::detail
