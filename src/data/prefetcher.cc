// The prefetch thread of datasets and distributed iterators: one producer, a ring of slots.
#include "distribute/data/internal/prefetcher.h"

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"

namespace distribute::data::internal {

struct Prefetcher::State {
  State(std::size_t slots, absl::AnyInvocable<bool(std::size_t)> producer)
      : capacity(slots), produce(std::move(producer)) {}

  void run();

  const std::size_t capacity;
  absl::AnyInvocable<bool(std::size_t)> produce;  // called on the thread only

  detail::Mutex mu;
  std::condition_variable_any slot_freed;  // the producer waits on it for a free slot or a stop
  std::condition_variable_any item_ready;  // consumers wait on it for an item or the end
  // The ring is slots [taken, produced) modulo capacity.
  std::uint64_t produced ABSL_GUARDED_BY(mu) = 0;
  std::uint64_t taken ABSL_GUARDED_BY(mu) = 0;
  bool finished ABSL_GUARDED_BY(mu) = false;  // produce() returned false or threw: nothing more comes
  bool stopping ABSL_GUARDED_BY(mu) = false;  // the owner is being destroyed
  std::exception_ptr error ABSL_GUARDED_BY(mu);

  std::thread thread;  // started last, once the fields above exist
};

void Prefetcher::State::run() {
  for (;;) {
    std::size_t slot = 0;
    {
      detail::MutexLock lock(mu);
      while (!stopping && produced - taken == capacity) slot_freed.wait(mu);
      if (stopping) return;
      slot = static_cast<std::size_t>(produced % capacity);
    }
    bool more = false;
    std::exception_ptr failure;
    try {
      more = produce(slot);
    } catch (...) {
      failure = std::current_exception();
    }
    {
      detail::MutexLock lock(mu);
      if (more) {
        ++produced;
      } else {
        finished = true;
        error = std::move(failure);
      }
    }
    item_ready.notify_all();
    if (!more) return;
  }
}

Prefetcher::Prefetcher(std::size_t capacity, absl::AnyInvocable<bool(std::size_t)> produce)
    : state_(std::make_unique<State>(capacity, std::move(produce))) {
  state_->thread = std::thread([state = state_.get()] { state->run(); });
}

Prefetcher::~Prefetcher() {
  {
    detail::MutexLock lock(state_->mu);
    state_->stopping = true;
  }
  state_->slot_freed.notify_all();
  state_->thread.join();
}

bool Prefetcher::pop(absl::FunctionRef<void(std::size_t)> take) {
  State& s = *state_;
  {
    detail::MutexLock lock(s.mu);
    while (s.taken == s.produced && !s.finished) s.item_ready.wait(s.mu);
    if (s.taken == s.produced) {
      if (s.error) std::rethrow_exception(s.error);
      return false;
    }
    take(static_cast<std::size_t>(s.taken % s.capacity));
    ++s.taken;
  }
  s.slot_freed.notify_one();
  return true;
}

}  // namespace distribute::data::internal
