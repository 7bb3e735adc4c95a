// distribute::detail: std::mutex with Clang's thread-safety annotations, so that state marked
// ABSL_GUARDED_BY is checked by -Wthread-safety. Not absl::Mutex: Debian's Abseil is built
// without ThreadSanitizer, which would then not see its locks and report false races.
#pragma once

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace distribute::detail {

class ABSL_LOCKABLE Mutex {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace distribute::detail
