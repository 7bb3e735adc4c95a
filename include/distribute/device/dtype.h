// Element types of tensors, their sizes and names, and the mapping between DType and C++ types.
// dispatch_dtype() is the one place that turns a run-time DType into a compile-time type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include <Eigen/Core>

#include "distribute/errors.h"

namespace distribute {

enum class DType : std::uint8_t { kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16 };

// TF's name of the type: "float32", "float64", "int32", "int64", "float16", "bfloat16".
const char* dtype_name(DType dtype);
bool is_floating(DType dtype);
std::ostream& operator<<(std::ostream& os, DType dtype);

using Half = Eigen::half;
using BFloat16 = Eigen::bfloat16;

template <class T>
struct DTypeOf;  // undefined: T is not a tensor element type
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };

// True for the C++ types that can be tensor elements.
template <class T>
concept Element = requires { DTypeOf<std::remove_cv_t<T>>::value; };

template <Element T>
inline constexpr DType dtype_v = DTypeOf<std::remove_cv_t<T>>::value;

// A tag carrying a type, so a generic lambda can learn which element type it was called for.
template <class T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with the C++ type T of dtype and returns what fn returns.
template <class Fn>
decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(TypeTag<float>{});
    case DType::kFloat64: return fn(TypeTag<double>{});
    case DType::kInt32: return fn(TypeTag<std::int32_t>{});
    case DType::kInt64: return fn(TypeTag<std::int64_t>{});
    case DType::kFloat16: return fn(TypeTag<Half>{});
    case DType::kBFloat16: return fn(TypeTag<BFloat16>{});
  }
  throw InternalError("dispatch_dtype: unknown dtype value " +
                      std::to_string(static_cast<int>(dtype)));
}

// Inline: every buffer's byte count goes through it.
inline std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
  }
  return dispatch_dtype(dtype, []<class T>(TypeTag<T>) { return sizeof(T); });  // throws: unknown value
}

}  // namespace distribute
