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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/data/internal/elements.h"
#include "distribute/data/internal/pass.h"
#include "distribute/device/tensor.h"
#include "distribute/nest/nest.h"

namespace distribute::data {

namespace internal {

template <class T>
struct IsTensorNest : std::bool_constant<std::same_as<T, Tensor>> {};
template <class T>
struct IsTensorNest<std::vector<T>> : IsTensorNest<T> {};
template <class T, std::size_t N>
struct IsTensorNest<std::array<T, N>> : IsTensorNest<T> {};
template <class... Ts>
struct IsTensorNest<std::tuple<Ts...>> : std::bool_constant<(IsTensorNest<Ts>::value && ...)> {};
template <class A, class B>
struct IsTensorNest<std::pair<A, B>> : std::bool_constant<IsTensorNest<A>::value && IsTensorNest<B>::value> {};
template <class T>
struct IsTensorNest<std::map<std::string, T>> : IsTensorNest<T> {};

template <class Members>
struct MembersAreTensorNests;
template <class... Cs, class... Ms>
struct MembersAreTensorNests<std::tuple<Ms Cs::*...>> : std::bool_constant<(IsTensorNest<Ms>::value && ...)> {};
template <class T>
  requires requires { nest::StructFields<T>::members; }
struct IsTensorNest<T>
    : MembersAreTensorNests<std::remove_cv_t<decltype(nest::StructFields<T>::members)>> {};

}  // namespace internal

// A nest whose leaves are all Tensors: what a dataset's elements are.
template <class T>
concept TensorNest = internal::IsTensorNest<T>::value;

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
  Dataset derived(internal::Start<T> start) const { return Dataset(std::move(start), batch_spec_); }

  std::shared_ptr<const internal::Start<T>> start_;
  std::optional<BatchSpec> batch_spec_;
};

// int64 scalars start, start + step, ... up to stop, excluded (tf.data.Dataset.range).
// InvalidArgumentError for step 0.
Dataset<Tensor> range(std::int64_t stop);
Dataset<Tensor> range(std::int64_t start, std::int64_t stop, std::int64_t step = 1);

// ---------------------------------------------------------------------------------------------
// Implementation of the templates. Each transformation's Start captures its input's Start and
// builds, per pass, a Next that owns the pass's state; a Next is not called again after it
// returned nullopt or threw (Iterator guarantees it, and each Next keeps it for its input).

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
Dataset<T> Dataset<T>::from_tensor_slices(const T& tensors) {
  auto leaves = std::make_shared<internal::SlicedLeaves>();
  nest::for_each_leaf(tensors, [&](const Tensor& leaf) { leaves->add(leaf); });
  if (leaves->empty()) internal::SlicedLeaves::throw_no_leaves(nest::describe_structure(tensors));
  return Dataset(
      [structure = std::make_shared<const T>(tensors), leaves]() -> internal::Next<T> {
        return [structure, leaves, row = std::int64_t{0}]() mutable -> std::optional<T> {
          if (row == leaves->size()) return std::nullopt;
          std::size_t leaf = 0;
          T element = nest::map_leaves(*structure, [&](const Tensor&) { return leaves->element(leaf++, row); });
          ++row;
          return element;
        };
      },
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
  return Dataset(
      [start = start_, batch_size, drop_remainder]() -> internal::Next<T> {
        return [next = (*start)(), builder = internal::BatchBuilder(batch_size), drop_remainder,
                ended = false]() mutable -> std::optional<T> {
          std::optional<T> first;
          std::uint64_t first_structure = 0;
          builder.reset();
          while (!ended && !builder.full()) {
            std::optional<T> element = next();
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
          if (builder.rows() == 0 || (drop_remainder && !builder.full())) return std::nullopt;
          std::size_t leaf = 0;
          return nest::map_leaves(*first, [&](const Tensor&) { return builder.result(leaf++); });
        };
      },
      BatchSpec{batch_size, drop_remainder});
}

template <class T>
Dataset<T> Dataset<T>::shuffle(std::int64_t buffer_size, std::uint64_t seed, bool reshuffle_each_iteration) const {
  internal::check_at_least_one(buffer_size, "shuffle", "buffer_size");
  // Shared by the copies of this dataset: the n-th iteration of any of them draws order n.
  auto epochs = reshuffle_each_iteration ? std::make_shared<std::atomic<std::uint64_t>>(0) : nullptr;
  return derived([start = start_, capacity = static_cast<std::size_t>(buffer_size), seed,
                  epochs]() -> internal::Next<T> {
    const std::uint64_t epoch = epochs ? epochs->fetch_add(1, std::memory_order_relaxed) : 0;
    return [next = (*start)(), rng = internal::ShuffleRng(seed, epoch), buffer = std::vector<T>(), capacity,
            ended = false]() mutable -> std::optional<T> {
      while (!ended && buffer.size() < capacity) {
        std::optional<T> element = next();
        if (!element) {
          ended = true;
          break;
        }
        buffer.push_back(std::move(*element));
      }
      if (buffer.empty()) return std::nullopt;
      const std::size_t pick = rng.below(buffer.size());
      T out = std::move(buffer[pick]);
      if (pick + 1 != buffer.size()) buffer[pick] = std::move(buffer.back());
      buffer.pop_back();
      return out;
    };
  });
}

template <class T>
Dataset<T> Dataset<T>::repeat(std::int64_t count) const {
  internal::check_count(count, "repeat", "to repeat forever");
  return derived([start = start_, count]() -> internal::Next<T> {
    return [start, count, next = internal::Next<T>(), passes = std::int64_t{0},
            yielded = false]() mutable -> std::optional<T> {
      for (;;) {
        if (!next) {
          if (passes == count) return std::nullopt;
          next = (*start)();
          ++passes;
          yielded = false;
        }
        if (std::optional<T> element = next()) {
          yielded = true;
          return element;
        }
        next = nullptr;
        if (!yielded) return std::nullopt;  // every pass would be as empty: repeating it would never end
      }
    };
  });
}

template <class T>
Dataset<T> Dataset<T>::take(std::int64_t count) const {
  internal::check_count(count, "take", "for every element");
  return derived([start = start_, count]() -> internal::Next<T> {
    return [next = (*start)(), left = count]() mutable -> std::optional<T> {
      if (left == 0) return std::nullopt;
      if (left > 0) --left;
      return next();
    };
  });
}

template <class T>
Dataset<T> Dataset<T>::skip(std::int64_t count) const {
  internal::check_count(count, "skip", "to skip every element");
  return derived([start = start_, count]() -> internal::Next<T> {
    return [next = (*start)(), left = count]() mutable -> std::optional<T> {
      for (; left != 0; left = left > 0 ? left - 1 : left) {
        if (!next()) return std::nullopt;
      }
      return next();
    };
  });
}

template <class T>
Dataset<T> Dataset<T>::shard(std::int64_t num_shards, std::int64_t index) const {
  internal::check_shard(num_shards, index);
  return derived([start = start_, num_shards, index]() -> internal::Next<T> {
    return [next = (*start)(), num_shards, index, position = std::int64_t{0}]() mutable -> std::optional<T> {
      for (;;) {
        std::optional<T> element = next();
        if (!element || position++ % num_shards == index) return element;
      }
    };
  });
}

template <class T>
template <class Fn>
auto Dataset<T>::map(Fn fn) const {
  using U = std::decay_t<std::invoke_result_t<const Fn&, const T&>>;
  static_assert(TensorNest<U>, "Dataset::map: fn must return a Tensor or a nest whose leaves are all Tensors");
  return Dataset<U>(
      [start = start_, fn = std::make_shared<const Fn>(std::move(fn))]() -> internal::Next<U> {
        return [next = (*start)(), fn]() mutable -> std::optional<U> {
          std::optional<T> element = next();
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
