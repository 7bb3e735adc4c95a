// The loop shape the optimizers' update steps share: the two floating-point dtypes they accept,
// and a pass over a variable's elements in chunks small enough that a chunk of every operand
// stays in L1 cache across the statements of one step, so an update reading and writing several
// arrays still walks each array's memory once.
#pragma once

#include <algorithm>
#include <type_traits>

#include <Eigen/Core>

#include "distribute/device/dtype.h"
#include "distribute/errors.h"

namespace distribute::optimizers::detail {

inline constexpr Eigen::Index kChunkElements = 2048;

// Calls fn(TypeTag<T>{}) for float32 (T = float) or float64 (T = double).
template <class Fn>
void dispatch_floating(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(TypeTag<float>{}); return;
    case DType::kFloat64: fn(TypeTag<double>{}); return;
    default: throw InternalError("optimizers: update_step called for a variable that is not float32 or float64");
  }
}

// Calls fn(begin, length) for consecutive chunks covering [0, size).
template <class Fn>
void for_each_chunk(Eigen::Index size, Fn&& fn) {
  for (Eigen::Index begin = 0; begin < size; begin += kChunkElements) fn(begin, std::min(kChunkElements, size - begin));
}

}  // namespace distribute::optimizers::detail
