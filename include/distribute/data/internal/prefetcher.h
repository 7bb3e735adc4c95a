// data::internal::Prefetcher: a background thread that produces items ahead of their consumer
// into a ring of slots that the caller owns, so that this class needs no template: it runs the
// thread and counts the slots, the caller's template stores the items. Dataset::prefetch and the
// distributed iterator (input/) are built on it (see PrefetchedPass in pass.h).
//
// Contract:
//   - produce(slot) runs on the thread only, one call at a time, in slot order: it writes the next
//     item into the caller's slot `slot` (in [0, capacity)) and returns true, or returns false at
//     the end. It is not called for a slot whose item has not been taken yet.
//   - pop(take) waits for the oldest item not taken and calls take(slot) on the calling thread,
//     under the lock, so everything produce() wrote to that slot is visible there, and several
//     threads may pop. It returns false once every item is taken and produce() returned false.
//   - When produce() throws, pop() rethrows that exception (the same object, with its own type)
//     once the items produced before it are taken, and again on every later call.
//   - The destructor stops the thread and joins it: at once while it waits for a free slot, else
//     as soon as the produce() under way returns (user code that blocks forever delays it).
#pragma once

#include <cstddef>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"

namespace distribute::data::internal {

class Prefetcher {
 public:
  // Starts the thread. capacity >= 1: how many items may wait to be taken.
  Prefetcher(std::size_t capacity, absl::AnyInvocable<bool(std::size_t slot)> produce);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  bool pop(absl::FunctionRef<void(std::size_t slot)> take);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace distribute::data::internal
