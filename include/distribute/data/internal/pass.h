// data::internal: how a dataset is made of passes. A dataset holds a Start, a function that begins
// one pass over its elements; a pass is a Next, called for each element until it returns nullopt.
// Every transformation wraps the Start of its input, so a pipeline is a chain of Nexts built
// afresh for each iteration (that is what makes datasets re-iterable). Also the two pieces built
// on that protocol: PrefetchedPass (a pass run ahead on a Prefetcher thread) and LoopIterator
// (what range-for uses over anything with get_next_as_optional()).
#pragma once

#include <cstddef>
#include <functional>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "distribute/data/internal/prefetcher.h"

namespace distribute::data::internal {

// One pass over the elements: the next element, nullopt at the end. Move-only: a pass may own a
// thread (prefetch) or a shuffle buffer.
template <class T>
using Next = absl::AnyInvocable<std::optional<T>()>;

// Begins a pass. Called once per iteration, possibly from several threads at once (a dataset is
// shared by its copies and by the datasets derived from it), so it keeps no state of its own.
template <class T>
using Start = std::function<Next<T>()>;

// A pass whose elements are produced ahead, on a Prefetcher thread, `capacity` at most. The thread
// stops and is joined when the PrefetchedPass is destroyed.
template <class T>
class PrefetchedPass {
 public:
  PrefetchedPass(Next<T> upstream, std::size_t capacity)
      : upstream_(std::move(upstream)), slots_(capacity), prefetcher_(capacity, [this](std::size_t slot) {
          slots_[slot] = upstream_();
          return slots_[slot].has_value();
        }) {}

  // The next element; nullopt at the end; the upstream's exception, with its type, from the call
  // that would have returned the element it failed to make, and from every call after it.
  std::optional<T> next() {
    std::optional<T> out;
    prefetcher_.pop([&](std::size_t slot) { out = std::exchange(slots_[slot], std::nullopt); });
    return out;
  }

 private:
  Next<T> upstream_;                   // run on the thread only
  std::vector<std::optional<T>> slots_;
  Prefetcher prefetcher_;              // last: stopped and joined before the slots go
};

// A range-for iterator over a source with get_next_as_optional() (data::Iterator,
// DistributedIterator): it holds a handle on the source and the element it stands on. Fetching
// happens in the constructor (the loop's begin()) and in ++, so an exception raised while making
// an element leaves the loop at the step that would have yielded it.
template <class Source>
class LoopIterator {
 public:
  using value_type = typename decltype(std::declval<Source&>().get_next_as_optional())::value_type;
  using difference_type = std::ptrdiff_t;

  explicit LoopIterator(Source source) : source_(std::move(source)), current_(source_.get_next_as_optional()) {}

  const value_type& operator*() const { return *current_; }
  const value_type* operator->() const { return &*current_; }
  LoopIterator& operator++() {
    current_.reset();  // the element's handles go before the next one is made
    current_ = source_.get_next_as_optional();
    return *this;
  }
  void operator++(int) { ++*this; }
  friend bool operator==(const LoopIterator& it, std::default_sentinel_t) { return !it.current_.has_value(); }

 private:
  Source source_;
  std::optional<value_type> current_;
};

}  // namespace distribute::data::internal
