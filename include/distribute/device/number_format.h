// Numbers printed the way Python and numpy print them, so Tensor and PerReplica output reads like
// TF's: integers as they are; floating-point values with the fewest digits that read back to the
// same value of their own type ("0.1" for float16(0.1)), ".0" on integral values ("2.0"), and
// scientific notation below 1e-4 and from 1e16 ("1e-05", "1e+16").
#pragma once

#include <string>
#include <type_traits>

#include "distribute/device/dtype.h"

namespace distribute {

// `value` holds an element of `dtype` converted to double.
std::string format_number(double value, DType dtype);

template <class T>
  requires std::is_arithmetic_v<T> || Element<T>
std::string format_number(T value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "True" : "False";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(value);
  } else if constexpr (Element<T>) {
    return format_number(static_cast<double>(value), dtype_v<T>);
  } else {
    return format_number(static_cast<double>(value), DType::kFloat64);
  }
}

}  // namespace distribute
