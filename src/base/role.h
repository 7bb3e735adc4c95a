// distribute::detail: Role, a capability that a thread holds by the protocol it follows rather
// than by taking a lock: the completer of a phase while the other replicas wait, or a replica
// released after it. State marked ABSL_GUARDED_BY(role) can then be touched only in code that
// says it assumes the role, so -Wthread-safety shows every place that relies on the protocol, and
// a new one cannot touch the state without saying so. Nothing is checked at run time (it costs
// nothing): the protocol itself is the check, and the ThreadSanitizer runs of the tests test it.
#pragma once

#include "absl/base/thread_annotations.h"

namespace distribute::detail {

class ABSL_LOCKABLE Role {
 public:
  // The caller holds the role alone from here to the end of its scope: it writes the state.
  void assume_held() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  // The caller may read the state from here to the end of its scope: nobody writes it meanwhile.
  void assume_shared() const ABSL_ASSERT_SHARED_LOCK() {}
};

}  // namespace distribute::detail
