// Reference counting of tensor storage, with the per-thread batching of dropped references.
#include "device/storage.h"

namespace distribute::detail {
namespace {

// This thread's dropped references not yet given back (see ReleaseBatch): `count` of them, all
// to `storage`.
struct DeferredReleases {
  bool active = false;
  Storage* storage = nullptr;
  std::int64_t count = 0;
};
constinit thread_local DeferredReleases deferred_releases;  // constinit: no init check per access

void give_back(DeferredReleases& deferred) {
  if (deferred.storage == nullptr) return;
  Storage* storage = std::exchange(deferred.storage, nullptr);
  StorageRef::release(storage, std::exchange(deferred.count, 0));
}

}  // namespace

void StorageRef::retain(Storage* storage, std::int64_t count) noexcept {
  storage->refs_.fetch_add(count, std::memory_order_relaxed);
}

void StorageRef::release(Storage* storage, std::int64_t count) noexcept {
  // acq_rel: every use of the memory through other references happens before the delete.
  if (storage->refs_.fetch_sub(count, std::memory_order_acq_rel) == count) Storage::dispose(storage);
}

void StorageRef::drop(Storage* storage) noexcept {
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
    Storage::dispose(storage);
  }
}

void* storage_data(const Storage& storage) { return storage.data(); }
const Device& storage_device(const Storage& storage) { return storage.device(); }

StorageRef make_storage(void* data, std::size_t nbytes, Device device, Storage::Release release) {
  return StorageRef::adopt(new Storage(data, nbytes, std::move(device), std::move(release)));
}

StorageRef alias_storage(const StorageRef& of, Device device) {
  const Storage& storage = *of.get();
  return StorageRef::adopt(new Storage(storage.data(), storage.nbytes(), std::move(device),
                                       [held = of](void*, std::size_t) {}, storage.block()));
}

ReleaseBatch::ReleaseBatch() : outer_(std::exchange(deferred_releases.active, true)) {}

ReleaseBatch::~ReleaseBatch() {
  give_back(deferred_releases);
  deferred_releases.active = outer_;
}

}  // namespace distribute::detail
