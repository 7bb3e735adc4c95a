// DistributedValues: one value per replica, as returned by Strategy::run and taken by run, reduce
// and gather. PerReplica values may differ between replicas; Mirrored values are the same on every
// replica (e.g. weights kept in sync). Prints like TF:
//   PerReplica:{
//     0: <Tensor: shape=(), dtype=int32, numpy=0>,
//     1: <Tensor: shape=(), dtype=int32, numpy=1>
//   }
#pragma once

#include <initializer_list>
#include <ostream>
#include <type_traits>
#include <vector>

#include "distribute/check.h"
#include "distribute/values/format.h"

namespace distribute {

template <class T>
class DistributedValues {
 public:
  using value_type = T;

  // Throws InvalidArgumentError when values is empty: every replica has a value.
  explicit DistributedValues(std::vector<T> values) : values_(std::move(values)) {
    DISTRIBUTE_CHECK(!values_.empty(), InvalidArgumentError,
                     "distributed values need one value per replica; got an empty list");
  }

  const std::vector<T>& values() const { return values_; }
  int num_replicas() const { return static_cast<int>(values_.size()); }
  // The value of replica i; throws OutOfRangeError unless 0 <= i < num_replicas().
  // (const_reference, not const T&: std::vector<bool> hands out proxies.)
  typename std::vector<T>::const_reference operator[](int i) const {
    DISTRIBUTE_CHECK(i >= 0 && i < num_replicas(), OutOfRangeError, "replica ", i,
                     " does not exist: these distributed values have ", num_replicas(), " replicas");
    return values_[static_cast<std::size_t>(i)];
  }

 private:
  std::vector<T> values_;
};

template <class T>
class PerReplica : public DistributedValues<T> {
 public:
  explicit PerReplica(std::vector<T> values) : DistributedValues<T>(std::move(values)) {}
  PerReplica(std::initializer_list<T> values) : DistributedValues<T>(std::vector<T>(values)) {}
};

template <class T>
class Mirrored : public DistributedValues<T> {
 public:
  explicit Mirrored(std::vector<T> values) : DistributedValues<T>(std::move(values)) {}
  Mirrored(std::initializer_list<T> values) : DistributedValues<T>(std::vector<T>(values)) {}
  // The same value on each of num_replicas replicas.
  Mirrored(const T& value, int num_replicas)
      : DistributedValues<T>(std::vector<T>(static_cast<std::size_t>(std::max(num_replicas, 0)), value)) {}
};

template <class T>
struct IsDistributed : std::false_type {};
template <class T>
struct IsDistributed<DistributedValues<T>> : std::true_type {};
template <class T>
struct IsDistributed<PerReplica<T>> : std::true_type {};
template <class T>
struct IsDistributed<Mirrored<T>> : std::true_type {};

// True for DistributedValues, PerReplica and Mirrored (after removing cv and references).
template <class T>
concept Distributed = IsDistributed<std::remove_cvref_t<T>>::value;

namespace detail {

template <class T>
void print_distributed(std::ostream& os, const char* name, const DistributedValues<T>& v) {
  os << name << ":{\n";
  for (int i = 0; i < v.num_replicas(); ++i) {
    os << "  " << i << ": ";
    print_value(os, v[i]);
    os << (i + 1 < v.num_replicas() ? ",\n" : "\n");
  }
  os << '}';
}

}  // namespace detail

template <class T>
std::ostream& operator<<(std::ostream& os, const DistributedValues<T>& v) {
  detail::print_distributed(os, "DistributedValues", v);
  return os;
}
template <class T>
std::ostream& operator<<(std::ostream& os, const PerReplica<T>& v) {
  detail::print_distributed(os, "PerReplica", v);
  return os;
}
template <class T>
std::ostream& operator<<(std::ostream& os, const Mirrored<T>& v) {
  detail::print_distributed(os, "Mirrored", v);
  return os;
}

}  // namespace distribute
