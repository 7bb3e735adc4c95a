// Distributed input: a dataset's batches handed out to the replicas of a strategy, prepared ahead
// of the step that reads them (tf.distribute.DistributedDataset and DistributedIterator). Made by
// Strategy::experimental_distribute_dataset and distribute_datasets_from_function, or directly
// from the replicas' devices (this layer needs no Strategy):
//
//   auto ds = data::Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>({5, 6, 7, 8})).batch(2);
//   for (auto batch : strategy.experimental_distribute_dataset(ds)) strategy.run(step, batch);
//   // step 1: replica 0 gets [5.0], replica 1 [6.0]; step 2: [7.0] and [8.0]
//
// Three policies:
//   - experimental_distribute_dataset (from_dataset): every element is a global batch, cut along
//     dimension 0 into one view per replica (input/internal/split.h: G / N rows each from the
//     dataset's batch size G, the first G % N replicas one more, a partial batch filled in replica
//     order, so later replicas get fewer rows or an empty batch: 0 rows, same trailing shape and
//     dtype). With one replica the element is passed whole.
//   - distribute_datasets_from_function (from_function), InputReplicationMode::kPerWorker:
//     dataset_fn is called once, for this process's one input pipeline, with InputContext(1, 0,
//     N); its elements are per-replica batches and the replicas of a step take consecutive
//     elements. When the data runs out in the middle of a step, the replicas left without an
//     element get an empty batch, unless the dataset's last batch() drops its remainder: then that
//     partial step is dropped too.
//   - from_function with kPerReplica: dataset_fn is called once per replica of this worker, with
//     InputContext(N, global replica id, N); each step takes one element of every replica's
//     dataset. A replica whose dataset has run out gets an empty batch while others still have
//     elements (the step is dropped instead when a dataset's last batch() drops its remainder);
//     the data ends when every dataset has.
//
// Iteration: each make_iterator() (or range-for) starts a new pass over the dataset and a thread
// of its own that prepares experimental_per_replica_buffer_size steps ahead (split, and placed on
// the replicas' devices when experimental_fetch_to_device), so a step that takes longer than its
// input never waits for it. The thread is stopped and joined when the last handle on the iterator
// goes, also in the middle of the data and while it waits for room in its buffer. Iterate in the
// caller's loop: inside a replica's function get_next, make_iterator and begin throw
// FailedPreconditionError. An exception from the dataset's code (a generator, a map fn) comes out
// of the get_next, or loop step, that would have returned that step, with its own type, and again
// from every later call; the end of the data is get_next's OutOfRangeError, or nullopt.
//
// Across the workers of a multi-worker strategy, whose pipelines may end at different steps, each
// get_next agrees with the other workers' on the step (input/internal/worker_agreement.h): it runs
// while any worker has data, and a worker without gives its replicas empty batches, modelled on
// its first element of the pass, or on another worker's when it has none (unless the dataset's
// last batch() drops its remainder: then the loops end at the first step that not every replica of
// every worker can fill). Every worker's loop runs the same steps and ends together.
#pragma once

#include <algorithm>
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

#include "distribute/data/dataset.h"
#include "distribute/device/device.h"
#include "distribute/device/tensor.h"
#include "distribute/input/input_options.h"
#include "distribute/input/internal/input_workers.h"
#include "distribute/input/internal/split.h"
#include "distribute/input/internal/worker_agreement.h"
#include "distribute/nest/nest.h"
#include "distribute/values/distributed_values.h"
#include "distribute/values/value_context.h"

namespace distribute {

template <class T>
class DistributedDataset;

namespace input::internal {
template <class T>
class Steps;
}  // namespace input::internal

// One pass over a distributed dataset. A handle: copies share the position and the thread.
template <class T>
class DistributedIterator {
 public:
  // The next step's batches, one per replica; OutOfRangeError at the end of the data.
  PerReplica<T> get_next();
  // The next step's batches, or nullopt at the end (and on every call after it).
  std::optional<PerReplica<T>> get_next_as_optional();
  // Range-for from the current position on.
  data::internal::LoopIterator<DistributedIterator> begin() {
    return data::internal::LoopIterator<DistributedIterator>(*this);
  }
  std::default_sentinel_t end() const { return {}; }

 private:
  friend class DistributedDataset<T>;
  using Steps = input::internal::Steps<T>;
  explicit DistributedIterator(std::shared_ptr<Steps> steps) : steps_(std::move(steps)) {}

  std::shared_ptr<Steps> steps_;
};

template <class T>
class DistributedDataset {
 public:
  using element_type = T;

  // Splits every element of `dataset` between replicas on worker_devices (one per replica, in
  // replica order). InvalidArgumentError for no device or a buffer size < 1, UnimplementedError for
  // InputReplicationMode::kPerReplica. With a `context` of
  // several workers, each element (a global batch) is split between every worker's replicas and
  // this worker keeps its replicas' rows; `agreement` (a multi-worker strategy's) makes its
  // iterators agree on each step with the other workers'.
  static DistributedDataset from_dataset(std::vector<Device> worker_devices, data::Dataset<T> dataset,
                                         const InputOptions& options = {},
                                         std::optional<InputContext> context = std::nullopt,
                                         std::weak_ptr<input::internal::WorkerAgreement> agreement = {});
  // Calls dataset_fn(context), by default InputContext(1, 0, worker_devices.size()), once, at
  // once; the replicas take the elements of the data::Dataset<T> it returns in turn. With
  // InputReplicationMode::kPerReplica, calls it once per device instead (see above).
  template <class Fn>
  static DistributedDataset from_function(std::vector<Device> worker_devices, Fn&& dataset_fn,
                                          const InputOptions& options = {},
                                          std::optional<InputContext> context = std::nullopt,
                                          std::weak_ptr<input::internal::WorkerAgreement> agreement = {});

  DistributedIterator<T> make_iterator() const;
  data::internal::LoopIterator<DistributedIterator<T>> begin() const { return make_iterator().begin(); }
  std::default_sentinel_t end() const { return {}; }

  // Every worker's replicas (the PerReplica batches hold this worker's).
  int num_replicas_in_sync() const { return workers_->num_replicas_in_sync(); }

 private:
  enum class Policy { kSplitEachElement, kElementPerReplica, kDatasetPerReplica };
  DistributedDataset(std::shared_ptr<const input::internal::InputWorkers> workers,
                     std::vector<data::Dataset<T>> datasets, Policy policy)
      : workers_(std::move(workers)), datasets_(std::move(datasets)), policy_(policy) {}

  std::shared_ptr<const input::internal::InputWorkers> workers_;
  // One dataset, or one per local replica for kDatasetPerReplica.
  std::vector<data::Dataset<T>> datasets_;
  Policy policy_;
};

// ---------------------------------------------------------------------------------------------
// Implementation of the templates.

namespace input::internal {

// The step of experimental_distribute_dataset: `element` cut into one batch per replica.
template <class T>
PerReplica<T> split_element(const T& element, const InputWorkers& workers, std::optional<std::int64_t> batch_size) {
  const int n = workers.num_replicas_in_sync();
  const int local = workers.num_replicas();
  std::vector<T> values;
  values.reserve(static_cast<std::size_t>(local));
  if (n == 1) {
    values.push_back(nest::map_leaves(element, [&](const Tensor& leaf) { return workers.place(leaf, 0); }));
    return PerReplica<T>(std::move(values));
  }
  std::int64_t rows = 0;
  std::size_t index = 0;
  nest::for_each_leaf(element, [&](const Tensor& leaf) { rows = split_rows(leaf, index++, rows, n); });
  for (int r = 0; r < local; ++r) {
    const RowRange range = replica_rows(rows, batch_size, n, workers.first_replica() + r);
    values.push_back(
        nest::map_leaves(element, [&](const Tensor& leaf) { return workers.place(leaf.slice(range.begin, range.end), r); }));
  }
  return PerReplica<T>(std::move(values));
}

// A step as this worker's pipeline made it: `full` when every local replica has an element (not
// an empty batch standing in for one).
template <class T>
struct LocalStep {
  PerReplica<T> batches;
  bool full = true;
};

template <class T>
data::internal::Next<LocalStep<T>> split_pass(data::Iterator<T> elements, std::shared_ptr<const InputWorkers> workers,
                                              std::optional<std::int64_t> batch_size) {
  return [elements = std::move(elements), workers = std::move(workers),
          batch_size]() mutable -> std::optional<LocalStep<T>> {
    std::optional<T> element = elements.get_next_as_optional();
    if (!element) return std::nullopt;
    return LocalStep<T>{split_element(*element, *workers, batch_size), true};
  };
}

// The steps of distribute_datasets_from_function: consecutive elements, one per replica.
template <class T>
data::internal::Next<LocalStep<T>> per_replica_pass(data::Iterator<T> elements,
                                                    std::shared_ptr<const InputWorkers> workers,
                                                    bool drop_partial_steps) {
  return [elements = std::move(elements), workers = std::move(workers),
          drop_partial_steps]() mutable -> std::optional<LocalStep<T>> {
    const auto n = static_cast<std::size_t>(workers->num_replicas());
    std::vector<T> values;
    values.reserve(n);
    std::optional<T> first;
    while (values.size() < n) {
      std::optional<T> element = elements.get_next_as_optional();
      if (!element) break;
      const int r = static_cast<int>(values.size());
      values.push_back(nest::map_leaves(*element, [&](const Tensor& leaf) { return workers->place(leaf, r); }));
      if (!first) first = std::move(element);
    }
    if (values.empty() || (drop_partial_steps && values.size() < n)) return std::nullopt;
    const bool full = values.size() == n;
    for (int r = static_cast<int>(values.size()); r < static_cast<int>(n); ++r) {
      std::size_t index = 0;
      values.push_back(nest::map_leaves(
          *first, [&](const Tensor& leaf) { return workers->place(empty_batch_like(leaf, index++, r), r); }));
    }
    return LocalStep<T>{PerReplica<T>(std::move(values)), full};
  };
}

// The steps of distribute_datasets_from_function in kPerReplica mode: one element of each
// replica's own dataset.
template <class T>
data::internal::Next<LocalStep<T>> replica_datasets_pass(std::vector<data::Iterator<T>> iterators,
                                                         std::shared_ptr<const InputWorkers> workers,
                                                         bool drop_partial_steps) {
  return [iterators = std::move(iterators), workers = std::move(workers),
          drop_partial_steps]() mutable -> std::optional<LocalStep<T>> {
    std::vector<std::optional<T>> elements;
    elements.reserve(iterators.size());
    const std::optional<T>* first = nullptr;
    std::size_t present = 0;
    for (data::Iterator<T>& it : iterators) elements.push_back(it.get_next_as_optional());
    for (const std::optional<T>& element : elements) {
      if (!element) continue;
      ++present;
      if (first == nullptr) first = &element;
    }
    if (present == 0 || (drop_partial_steps && present < elements.size())) return std::nullopt;
    std::vector<T> values;
    values.reserve(elements.size());
    for (std::size_t i = 0; i < elements.size(); ++i) {
      const int r = static_cast<int>(i);
      if (elements[i]) {
        values.push_back(nest::map_leaves(*elements[i], [&](const Tensor& leaf) { return workers->place(leaf, r); }));
      } else {
        std::size_t index = 0;
        values.push_back(nest::map_leaves(
            **first, [&](const Tensor& leaf) { return workers->place(empty_batch_like(leaf, index++, r), r); }));
      }
    }
    return LocalStep<T>{PerReplica<T>(std::move(values)), present == elements.size()};
  };
}

// One pass's steps, prepared ahead on the pass's thread. Across workers, each step is the one
// every worker's get_next agrees on (worker_agreement.h); a worker without data for it gives its
// replicas empty batches modelled on an element: its first of the pass, else the leaves another
// worker describes.
template <class T>
class Steps {
 public:
  Steps(data::internal::Next<LocalStep<T>> steps, std::shared_ptr<const InputWorkers> workers, bool drops)
      : pass_(std::move(steps), workers->buffer_size()), workers_(std::move(workers)), drops_(drops) {}

  std::optional<PerReplica<T>> next() {
    const GetNextSpan span;
    if (!workers_->agrees_across_workers()) {
      std::optional<LocalStep<T>> step = pass_.next();
      if (!step) return std::nullopt;
      return std::move(step->batches);
    }
    if (error_) std::rethrow_exception(error_);
    if (ended_) return std::nullopt;
    try {
      return next_agreed();
    } catch (...) {
      if (!error_) error_ = std::current_exception();
      throw;
    }
  }

 private:
  std::optional<PerReplica<T>> next_agreed() {
    const std::shared_ptr<WorkerAgreement> agreement = workers_->agreement();
    StepReport mine;
    mine.step = ++step_;
    mine.drops = drops_;
    std::optional<LocalStep<T>> local;
    try {
      local = pass_.next();
    } catch (...) {
      error_ = std::current_exception();
      mine.status = StepReport::Status::kFailed;
    }
    if (local) {
      mine.status = StepReport::Status::kData;
      mine.full = local->full;
      if (!model_ && !scalar_) learn_model(local->batches[0]);
    }
    mine.empties = model_ ? StepReport::Empties::kCan : scalar_ ? StepReport::Empties::kScalar : StepReport::Empties::kNone;
    mine.structure = model_ ? structure_ : default_structure();
    StepDecision decision;
    try {
      decision = agreement->agree(mine, [this] { return describe(); });
    } catch (...) {
      if (!error_) throw;
    }
    if (error_) std::rethrow_exception(error_);  // this worker's own failure comes first
    if (!decision.run) {
      ended_ = true;
      return std::nullopt;
    }
    if (local) return std::move(local->batches);
    if (!model_) model_from(decision.leaves);
    std::vector<T> values;
    values.reserve(static_cast<std::size_t>(workers_->num_replicas()));
    for (int r = 0; r < workers_->num_replicas(); ++r) {
      values.push_back(nest::map_leaves(*model_, [&](const Tensor& leaf) { return workers_->place(leaf, r); }));
    }
    return PerReplica<T>(std::move(values));
  }

  // In host memory of its own, so that the model keeps no batch alive.
  void learn_model(const T& batch) {
    nest::for_each_leaf(batch, [&](const Tensor& leaf) { scalar_ = scalar_ || leaf.rank() < 1; });
    if (scalar_) return;
    model_ = nest::map_leaves(batch, [](const Tensor& leaf) {
      std::vector<std::int64_t> dims = leaf.shape().dims();
      dims[0] = 0;
      return Tensor::empty(leaf.dtype(), Shape(std::move(dims)), Device::cpu());
    });
    structure_ = nest::structure_hash(*model_);
  }

  static std::uint64_t default_structure() {
    if constexpr (std::is_default_constructible_v<T>) {
      return nest::structure_hash(T{});
    } else {
      return 0;
    }
  }

  std::vector<LeafSpec> describe() const {
    std::vector<LeafSpec> leaves;
    nest::for_each_leaf(*model_, [&](const Tensor& leaf) { leaves.push_back({leaf.dtype(), leaf.shape()}); });
    return leaves;
  }

  // The agreement found another worker's elements of a default T's structure, so T is
  // default-constructible here, with as many leaves.
  void model_from(const std::vector<LeafSpec>& leaves) {
    if constexpr (std::is_default_constructible_v<T>) {
      std::size_t index = 0;
      model_ = nest::map_leaves(T{}, [&](const Tensor&) {
        const LeafSpec& leaf = leaves[index++];
        return Tensor::empty(leaf.dtype, leaf.shape, Device::cpu());
      });
      structure_ = nest::structure_hash(*model_);
    }
  }

  data::internal::PrefetchedPass<LocalStep<T>> pass_;
  std::shared_ptr<const InputWorkers> workers_;
  const bool drops_;
  // Across workers only.
  std::int64_t step_ = 0;
  bool ended_ = false;
  std::exception_ptr error_;
  std::optional<T> model_;  // leaves of 0 rows, for the empty batches
  std::uint64_t structure_ = 0;
  bool scalar_ = false;     // the model element has a rank-0 leaf
};

}  // namespace input::internal

template <class T>
std::optional<PerReplica<T>> DistributedIterator<T>::get_next_as_optional() {
  input::internal::check_not_in_replica("DistributedIterator::get_next");
  return steps_->next();
}

template <class T>
PerReplica<T> DistributedIterator<T>::get_next() {
  std::optional<PerReplica<T>> step = get_next_as_optional();
  if (!step) data::internal::throw_end_of_sequence("DistributedIterator::get_next");
  return std::move(*step);
}

template <class T>
DistributedDataset<T> DistributedDataset<T>::from_dataset(std::vector<Device> worker_devices, data::Dataset<T> dataset,
                                                          const InputOptions& options,
                                                          std::optional<InputContext> context,
                                                          std::weak_ptr<input::internal::WorkerAgreement> agreement) {
  input::internal::check_splittable(options);
  std::vector<data::Dataset<T>> datasets;
  datasets.push_back(std::move(dataset));
  return DistributedDataset(std::make_shared<const input::internal::InputWorkers>(std::move(worker_devices), options,
                                                                                  context, std::move(agreement)),
                            std::move(datasets), Policy::kSplitEachElement);
}

template <class T>
template <class Fn>
DistributedDataset<T> DistributedDataset<T>::from_function(std::vector<Device> worker_devices, Fn&& dataset_fn,
                                                           const InputOptions& options,
                                                           std::optional<InputContext> context,
                                                           std::weak_ptr<input::internal::WorkerAgreement> agreement) {
  static_assert(std::is_convertible_v<std::invoke_result_t<Fn&, const InputContext&>, data::Dataset<T>>,
                "distribute_datasets_from_function: dataset_fn(const InputContext&) must return a data::Dataset");
  auto workers = std::make_shared<const input::internal::InputWorkers>(std::move(worker_devices), options, context,
                                                                       std::move(agreement));
  std::vector<data::Dataset<T>> datasets;
  if (!workers->per_replica()) {
    datasets.push_back(std::invoke(dataset_fn, workers->input_context()));
    return DistributedDataset(std::move(workers), std::move(datasets), Policy::kElementPerReplica);
  }
  for (int r = 0; r < workers->num_replicas(); ++r) {
    const input::internal::DatasetDeviceScope on_device(workers->dataset_device(r));
    datasets.push_back(std::invoke(dataset_fn, workers->replica_input_context(r)));
  }
  return DistributedDataset(std::move(workers), std::move(datasets), Policy::kDatasetPerReplica);
}

template <class T>
DistributedIterator<T> DistributedDataset<T>::make_iterator() const {
  input::internal::check_not_in_replica("DistributedDataset::make_iterator");
  const auto drops_remainder = [](const data::Dataset<T>& dataset) {
    return dataset.batch_spec() && dataset.batch_spec()->drop_remainder;
  };
  data::internal::Next<input::internal::LocalStep<T>> steps;
  bool drops = drops_remainder(datasets_[0]);
  switch (policy_) {
    case Policy::kSplitEachElement: {
      const std::optional<data::BatchSpec>& spec = datasets_[0].batch_spec();
      steps = input::internal::split_pass(datasets_[0].make_iterator(), workers_,
                                          spec ? std::optional<std::int64_t>(spec->batch_size) : std::nullopt);
      break;
    }
    case Policy::kElementPerReplica:
      steps = input::internal::per_replica_pass(datasets_[0].make_iterator(), workers_, drops);
      break;
    case Policy::kDatasetPerReplica: {
      std::vector<data::Iterator<T>> iterators;
      iterators.reserve(datasets_.size());
      for (const data::Dataset<T>& dataset : datasets_) iterators.push_back(dataset.make_iterator());
      drops = std::any_of(datasets_.begin(), datasets_.end(), drops_remainder);
      steps = input::internal::replica_datasets_pass(std::move(iterators), workers_, drops);
      break;
    }
  }
  return DistributedIterator<T>(std::make_shared<input::internal::Steps<T>>(std::move(steps), workers_, drops));
}

}  // namespace distribute
