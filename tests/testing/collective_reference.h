// Reference results that the collectives tests compare the library's with, written plainly here:
// what MEAN gives in each dtype, and all_gather's concatenation of every replica's part.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "distribute/distribute.h"
#include "testing/semantics_util.h"

namespace distribute::testing {

// What MEAN gives for `sum` over `count` values in dtype T: integer division truncates; half and
// bfloat16 accumulate in float; every result is rounded to T.
template <class T>
double mean_in(std::int64_t sum, std::int64_t count) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<double>(sum / count);
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(static_cast<T>(sum) / static_cast<T>(count));
  } else {
    return as_double(static_cast<T>(static_cast<float>(sum) / static_cast<float>(count)));
  }
}

inline double mean_of(DType dtype, std::int64_t sum, std::int64_t count) {
  return dispatch_dtype(dtype, [&]<class T>(TypeTag<T>) { return mean_in<T>(sum, count); });
}

inline std::vector<std::int64_t> concat_reference(const std::vector<std::vector<std::int64_t>>& parts,
                                           const std::vector<Shape>& shapes, int axis) {
  std::vector<std::int64_t> out;
  const std::int64_t outer = shapes[0].outer_size(axis);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::size_t r = 0; r < parts.size(); ++r) {
      const std::int64_t row = shapes[r][axis] * shapes[r].inner_size(axis);
      out.insert(out.end(), parts[r].begin() + o * row, parts[r].begin() + (o + 1) * row);
    }
  }
  return out;
}

inline std::vector<double> as_doubles(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

}  // namespace distribute::testing
