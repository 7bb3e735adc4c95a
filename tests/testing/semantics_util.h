// Helpers for the tests of the library's semantics: building tensors of any dtype from small
// integers, and reading any tensor back as doubles so results of every dtype compare with one
// EXPECT_EQ; zeros, float tensors from a list, what operator<< prints, the running replica's id,
// and the CPU backends' names in parameterised tests' names. Error checks come from error_expect.h.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"

namespace distribute::testing {

// Half and BFloat16 convert through float; the other element types convert directly.
template <class T>
T from_int(std::int64_t v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<T>(v);
  } else {
    return static_cast<T>(static_cast<float>(v));
  }
}
template <class T>
double as_double(const T& v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

// A tensor of `dtype` holding `values` (small integers, exact in every dtype) with `shape`.
inline Tensor tensor_of(DType dtype, const std::vector<std::int64_t>& values, const Shape& shape) {
  return dispatch_dtype(dtype, [&]<class T>(TypeTag<T>) {
    std::vector<T> typed;
    typed.reserve(values.size());
    for (std::int64_t v : values) typed.push_back(from_int<T>(v));
    return Tensor::from_vector<T>(std::move(typed), shape);
  });
}

// The elements of a host tensor of any dtype, as doubles.
inline std::vector<double> to_doubles(const Tensor& t) {
  return dispatch_dtype(t.dtype(), [&]<class T>(TypeTag<T>) {
    const std::vector<T> typed = t.to_vector<T>();
    std::vector<double> out;
    out.reserve(typed.size());
    for (const T& v : typed) out.push_back(as_double(v));
    return out;
  });
}

// Zeros of `shape`, float unless said otherwise.
inline Tensor zeros(Shape shape, DType dtype = DType::kFloat32) { return Tensor::zeros(dtype, std::move(shape)); }

// A float tensor of shape {values.size()}.
inline Tensor floats(std::vector<float> values) { return Tensor::from_vector<float>(std::move(values)); }

// What operator<< prints for `v`.
template <class V>
std::string printed(const V& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The calling replica's id in its sync group, as a T (float, to take part in float arithmetic).
template <class T = int>
T replica_id() {
  return static_cast<T>(get_replica_context()->replica_id_in_sync_group());
}

// The name of a backend of CPU replicas in a parameterised test's name.
inline std::string backend_label(CrossDeviceOps ops) {
  return ops == CrossDeviceOps::kAuto ? "SharedMemory" : "ReductionToOneDevice";
}

}  // namespace distribute::testing
