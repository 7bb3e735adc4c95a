// data::Dataset: tf.data.Dataset in small, the input side of a training loop. A dataset is a
// re-iterable sequence of elements, each a nest of Tensors (a Tensor, or a std::pair, tuple,
// vector, array, map<string, .> or registered struct of them, see nest/structure_traits.h).
//
//   auto ds = data::Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>({5, 6, 7, 8})).batch(2);
//   for (const Tensor& batch : ds) std::cout << batch << "\n";  // [5.0, 6.0], then [7.0, 8.0]
//
// Datasets are immutable values: a transformation returns a new dataset that shares the pipeline
// of the old one, and every iteration (make_iterator(), range-for) runs the pipeline afresh, so
// iterating twice gives the same elements (shuffle: a new order per iteration unless
// reshuffle_each_iteration = false). Strategy::experimental_distribute_dataset (input/) splits a
// dataset's batches between replicas.
//
// Where the work happens: on the thread that iterates, except upstream of prefetch(n), which runs
// on a thread of the iteration's own. User code in a dataset (generators, map fns) may therefore
// run on any thread, and concurrently when several iterations of one dataset run at once.
// Memory: from_tensor_slices elements are views of the given tensors, batch() writes new host
// tensors; treat elements as values and do not write into them.
// Failures: an exception thrown by user code reaches the get_next (or loop step) that would have
// returned the element being made, with its own type, and that iterator rethrows it on every
// later call. Bad arguments throw InvalidArgumentError when the transformation is made; elements
// that cannot be batched together throw it from the get_next that makes the batch.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/data/internal/elements.h"
#include "distribute/data/internal/pass.h"
#include "distribute/data/internal/streams.h"
#include "distribute/device/tensor.h"
#include "distribute/nest/nest.h"

namespace distribute::data {

namespace internal {

template <class T>
struct IsTensor : std::is_same<T, Tensor> {};

// A dataset whose elements are made by index: element(i) for each index i of a pass of `order`.
// from_tensor_slices makes its elements this way; take, skip, shard, repeat and shuffle keep it
// by changing the order (streams.h), map by changing element. batch of rows that no map has
// changed (`rows` set) copies them from the sliced leaves, making no element tensors.
template <class T>
struct Indexed {
  std::function<T(std::int64_t)> element;  // callable from any thread
  Start<std::int64_t> order;
  std::shared_ptr<const SlicedLeaves> rows;  // element(i) is row i of these leaves, nested as `structure`
  std::shared_ptr<const T> structure;
};

}  // namespace internal

// A nest whose leaves are all Tensors: what a dataset's elements are.
template <class T>
concept TensorNest = nest::AllLeaves<T, internal::IsTensor>::value;

// The last batch() of a pipeline, which experimental_distribute_dataset splits by.
struct BatchSpec {
  std::int64_t batch_size = 0;
  bool drop_remainder = false;
};

template <class T>
class Dataset;

// One iteration over a dataset (tf.data.Iterator). A handle: copies share the position. Use it
// from one thread at a time.
template <class T>
class Iterator {
 public:
  // The next element; OutOfRangeError at the end.
  T get_next();
  // The next element, or nullopt at the end (and on every call after it).
  std::optional<T> get_next_as_optional();
  // Range-for from the current position on.
  internal::LoopIterator<Iterator> begin() { return internal::LoopIterator<Iterator>(*this); }
  std::default_sentinel_t end() const { return {}; }

 private:
  friend class Dataset<T>;
  struct State {
    internal::Next<T> next;  // released at the end or on a failure (a prefetch thread stops)
    bool done = false;
    std::exception_ptr error;
  };
  explicit Iterator(internal::Next<T> next) : state_(std::make_shared<State>()) { state_->next = std::move(next); }

  std::shared_ptr<State> state_;
};

template <class T>
class Dataset {
  static_assert(TensorNest<T>, "data::Dataset<T>: T must be a Tensor or a nest whose leaves are all Tensors");

 public:
  using element_type = T;

  // Element i holds row i of every leaf of `tensors` (dimension 0 removed), as a view. Throws
  // InvalidArgumentError for a scalar or undefined leaf, for leaves whose dimension 0 differs, and
  // for a nest without leaves.
  static Dataset from_tensor_slices(const T& tensors);
  // Each iteration calls make_next() once for a generator, then calls the generator for each
  // element until it returns nullopt. InvalidArgumentError when make_next is empty (at once) or
  // returns an empty function (when the iteration starts).
  static Dataset from_generator(std::function<std::function<std::optional<T>()>()> make_next);

  // Stacks batch_size consecutive elements along a new dimension 0 (a last, smaller batch is
  // kept unless drop_remainder). Every element of a batch needs the same structure, and the same
  // dtype and shape in each leaf, in host memory. InvalidArgumentError for batch_size < 1.
  Dataset batch(std::int64_t batch_size, bool drop_remainder = false) const;
  // Elements in random order, drawn from a buffer of the next buffer_size elements as tf.data does
  // (a full shuffle when buffer_size >= the number of elements). The same seed gives the same
  // order; each iteration draws a new order unless reshuffle_each_iteration is false (copies of a
  // dataset share its iteration count). InvalidArgumentError for buffer_size < 1.
  Dataset shuffle(std::int64_t buffer_size, std::uint64_t seed, bool reshuffle_each_iteration = true) const;
  // The elements `count` times over (-1: forever; an iteration that yields nothing ends it).
  // InvalidArgumentError for count < -1, as for take and skip.
  Dataset repeat(std::int64_t count = -1) const;
  // The first `count` elements (-1: all).
  Dataset take(std::int64_t count) const;
  // All but the first `count` elements (-1: none).
  Dataset skip(std::int64_t count) const;
  // Elements index, index + num_shards, index + 2 * num_shards, ... InvalidArgumentError for
  // num_shards < 1 or index outside [0, num_shards).
  Dataset shard(std::int64_t num_shards, std::int64_t index) const;
  // Dataset<U> of fn(element), where U, the decayed result type, is a nest of Tensors. fn is
  // called as a const function object, possibly from several threads (see above). The batch spec
  // is kept: a map after batch() should keep the batch in dimension 0.
  template <class Fn>
  auto map(Fn fn) const;
  // Makes up to buffer_size elements ahead on a background thread, which belongs to each
  // iteration and is stopped and joined with it. InvalidArgumentError for buffer_size < 1.
  Dataset prefetch(std::int64_t buffer_size) const;

  Iterator<T> make_iterator() const { return Iterator<T>((*start_)()); }
  internal::LoopIterator<Iterator<T>> begin() const { return make_iterator().begin(); }
  std::default_sentinel_t end() const { return {}; }

  // The last batch() of the pipeline; nullopt when there is none.
  const std::optional<BatchSpec>& batch_spec() const { return batch_spec_; }

 private:
  template <class U>
  friend class Dataset;

  Dataset(internal::Start<T> start, std::optional<BatchSpec> batch_spec)
      : start_(std::make_shared<const internal::Start<T>>(std::move(start))), batch_spec_(batch_spec) {}
  static Dataset from_indexed(internal::Indexed<T> indexed, std::optional<BatchSpec> batch_spec);
  // A dataset of other elements than these: the batch spec stays, making elements by index goes.
  Dataset derived(internal::Start<T> start) const { return Dataset(std::move(start), batch_spec_); }
  // This dataset with its passes reordered: reorder(start) makes a pass from a Start of what it
  // reorders, the indices when elements are made by index, else the elements.
  template <class Reorder>
  Dataset reordered(Reorder reorder) const;

  std::shared_ptr<const internal::Start<T>> start_;
  std::optional<BatchSpec> batch_spec_;
  std::shared_ptr<const internal::Indexed<T>> indexed_;  // null unless elements are made by index
};

// int64 scalars start, start + step, ... up to stop, excluded (tf.data.Dataset.range).
// InvalidArgumentError for step 0.
Dataset<Tensor> range(std::int64_t stop);
Dataset<Tensor> range(std::int64_t start, std::int64_t stop, std::int64_t step = 1);

// ---------------------------------------------------------------------------------------------
// Implementation of the templates. Each transformation's Start captures its input's Start and
// builds, per pass, a Next that owns the pass's state; a Next is not called again after it
// returned nullopt or threw (Iterator guarantees it, and each Next keeps it for its input).

namespace internal {

// The elements of `indexed` at the indices of `order`.
template <class T>
Next<T> elements_at(std::shared_ptr<const Indexed<T>> indexed, Next<std::int64_t> order) {
  return [indexed = std::move(indexed), order = std::move(order)]() mutable -> std::optional<T> {
    std::optional<std::int64_t> index = order();
    if (!index) return std::nullopt;
    return indexed->element(*index);
  };
}

// The nest of `structure` holding the builder's stacked leaves.
template <class T>
T stacked(const T& structure, const BatchBuilder& builder) {
  std::size_t leaf = 0;
  return nest::map_leaves(structure, [&](const Tensor&) { return builder.result(leaf++); });
}

// batch(): consecutive elements stacked.
template <class T>
Next<T> batches_of(Next<T> elements, std::int64_t batch_size, bool drop_remainder) {
  return [elements = std::move(elements), builder = BatchBuilder(batch_size), drop_remainder,
          ended = false]() mutable -> std::optional<T> {
    std::optional<T> first;
    std::uint64_t first_structure = 0;
    builder.reset();
    while (!ended && !builder.full()) {
      std::optional<T> element = elements();
      if (!element) {
        ended = true;
        break;
      }
      const std::uint64_t structure = nest::structure_hash(*element);
      if (!first) {
        first = element;
        first_structure = structure;
      } else if (structure != first_structure) {
        builder.throw_structure_mismatch(nest::describe_structure(*element), nest::describe_structure(*first));
      }
      std::size_t leaf = 0;
      nest::for_each_leaf(*element, [&](const Tensor& value) { builder.add(leaf++, value); });
      builder.end_element();
    }
    if (!builder.has_batch(drop_remainder)) return std::nullopt;
    return stacked(*first, builder);
  };
}

// batch() of from_tensor_slices rows: the rows at the indices of the order, copied from the
// sliced leaves. The order is read one index ahead, so that the next row is on its way from
// memory while this one is copied.
template <class T>
Next<T> batches_of_rows(std::shared_ptr<const Indexed<T>> indexed, std::int64_t batch_size, bool drop_remainder) {
  return [indexed, order = indexed->order(), builder = BatchBuilder(batch_size), drop_remainder,
          upcoming = std::optional<std::int64_t>(), started = false]() mutable -> std::optional<T> {
    builder.reset();
    if (!started) {
      upcoming = order();
      started = true;
    }
    while (upcoming && !builder.full()) {
      const std::int64_t row = *upcoming;
      upcoming = order();
      if (upcoming) indexed->rows->prefetch_row(*upcoming);
      indexed->rows->add_row_to(builder, row);
      builder.end_element();
    }
    if (!builder.has_batch(drop_remainder)) return std::nullopt;
    return stacked(*indexed->structure, builder);
  };
}

}  // namespace internal

template <class T>
std::optional<T> Iterator<T>::get_next_as_optional() {
  State& s = *state_;
  if (s.error) std::rethrow_exception(s.error);
  if (s.done) return std::nullopt;
  try {
    std::optional<T> element = s.next();
    if (!element) {
      s.done = true;
      s.next = nullptr;
    }
    return element;
  } catch (...) {
    s.error = std::current_exception();
    s.next = nullptr;
    throw;
  }
}

template <class T>
T Iterator<T>::get_next() {
  std::optional<T> element = get_next_as_optional();
  if (!element) internal::throw_end_of_sequence("data::Iterator::get_next");
  return std::move(*element);
}

template <class T>
Dataset<T> Dataset<T>::from_indexed(internal::Indexed<T> indexed, std::optional<BatchSpec> batch_spec) {
  auto shared = std::make_shared<const internal::Indexed<T>>(std::move(indexed));
  Dataset out([shared] { return internal::elements_at(shared, shared->order()); }, batch_spec);
  out.indexed_ = std::move(shared);
  return out;
}

template <class T>
template <class Reorder>
Dataset<T> Dataset<T>::reordered(Reorder reorder) const {
  if (indexed_) {
    internal::Indexed<T> out = *indexed_;
    out.order = [order = indexed_->order, reorder] { return reorder(order); };
    return from_indexed(std::move(out), batch_spec_);
  }
  return derived([start = start_, reorder] { return reorder(*start); });
}

template <class T>
Dataset<T> Dataset<T>::from_tensor_slices(const T& tensors) {
  auto leaves = std::make_shared<internal::SlicedLeaves>();
  nest::for_each_leaf(tensors, [&](const Tensor& leaf) { leaves->add(leaf); });
  if (leaves->empty()) internal::SlicedLeaves::throw_no_leaves(nest::describe_structure(tensors));
  auto structure = std::make_shared<const T>(tensors);
  return from_indexed(internal::Indexed<T>{[structure, leaves](std::int64_t row) {
                                             std::size_t leaf = 0;
                                             return nest::map_leaves(*structure, [&](const Tensor&) {
                                               return leaves->element(leaf++, row);
                                             });
                                           },
                                           [size = leaves->size()] { return internal::indices(size); }, leaves,
                                           structure},
                      std::nullopt);
}

template <class T>
Dataset<T> Dataset<T>::from_generator(std::function<std::function<std::optional<T>()>()> make_next) {
  if (!make_next) internal::throw_empty_generator("make_next is empty");
  return Dataset(
      [make = std::make_shared<const std::function<std::function<std::optional<T>()>()>>(std::move(make_next))]()
          -> internal::Next<T> {
        std::function<std::optional<T>()> generator = (*make)();
        if (!generator) internal::throw_empty_generator("make_next returned an empty function");
        return generator;
      },
      std::nullopt);
}

template <class T>
Dataset<T> Dataset<T>::batch(std::int64_t batch_size, bool drop_remainder) const {
  internal::check_at_least_one(batch_size, "batch", "batch_size");
  const BatchSpec spec{batch_size, drop_remainder};
  if (indexed_ && indexed_->rows) {
    return Dataset([indexed = indexed_, spec] { return internal::batches_of_rows(indexed, spec.batch_size, spec.drop_remainder); },
                   spec);
  }
  return Dataset([start = start_, spec] { return internal::batches_of((*start)(), spec.batch_size, spec.drop_remainder); },
                 spec);
}

template <class T>
Dataset<T> Dataset<T>::shuffle(std::int64_t buffer_size, std::uint64_t seed, bool reshuffle_each_iteration) const {
  internal::check_at_least_one(buffer_size, "shuffle", "buffer_size");
  // Shared by the copies of this dataset: the n-th iteration of any of them draws order n.
  auto epochs = reshuffle_each_iteration ? std::make_shared<std::atomic<std::uint64_t>>(0) : nullptr;
  return reordered([capacity = static_cast<std::size_t>(buffer_size), seed, epochs](const auto& start) {
    const std::uint64_t epoch = epochs ? epochs->fetch_add(1, std::memory_order_relaxed) : 0;
    return internal::shuffled(start(), capacity, internal::ShuffleRng(seed, epoch));
  });
}

template <class T>
Dataset<T> Dataset<T>::repeat(std::int64_t count) const {
  internal::check_count(count, "repeat", "to repeat forever");
  return reordered([count](const auto& start) { return internal::repeated(start, count); });
}

template <class T>
Dataset<T> Dataset<T>::take(std::int64_t count) const {
  internal::check_count(count, "take", "for every element");
  return reordered([count](const auto& start) { return internal::taken(start(), count); });
}

template <class T>
Dataset<T> Dataset<T>::skip(std::int64_t count) const {
  internal::check_count(count, "skip", "to skip every element");
  return reordered([count](const auto& start) { return internal::skipped(start(), count); });
}

template <class T>
Dataset<T> Dataset<T>::shard(std::int64_t num_shards, std::int64_t index) const {
  internal::check_shard(num_shards, index);
  return reordered([num_shards, index](const auto& start) { return internal::sharded(start(), num_shards, index); });
}

template <class T>
template <class Fn>
auto Dataset<T>::map(Fn fn) const {
  using U = std::decay_t<std::invoke_result_t<const Fn&, const T&>>;
  static_assert(TensorNest<U>, "Dataset::map: fn must return a Tensor or a nest whose leaves are all Tensors");
  auto shared_fn = std::make_shared<const Fn>(std::move(fn));
  if (indexed_) {
    return Dataset<U>::from_indexed(internal::Indexed<U>{[input = indexed_, fn = shared_fn](std::int64_t i) -> U {
                                                           const T element = input->element(i);
                                                           return std::invoke(*fn, element);
                                                         },
                                                         indexed_->order, nullptr, nullptr},
                                    batch_spec_);
  }
  return Dataset<U>(
      [start = start_, fn = shared_fn]() -> internal::Next<U> {
        return [elements = (*start)(), fn]() mutable -> std::optional<U> {
          std::optional<T> element = elements();
          if (!element) return std::nullopt;
          return std::invoke(*fn, std::as_const(*element));
        };
      },
      batch_spec_);
}

template <class T>
Dataset<T> Dataset<T>::prefetch(std::int64_t buffer_size) const {
  internal::check_at_least_one(buffer_size, "prefetch", "buffer_size");
  return derived([start = start_, capacity = static_cast<std::size_t>(buffer_size)]() -> internal::Next<T> {
    return [pass = std::make_unique<internal::PrefetchedPass<T>>((*start)(), capacity)]() mutable {
      return pass->next();
    };
  });
}

}  // namespace distribute::data
