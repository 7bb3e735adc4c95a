// Printing of replica results and merge_call values: Tensors as TF prints them, numbers as Python
// prints them, and containers like Python prints lists, tuples and dicts. Used by PerReplica /
// Mirrored's operator<< and by the examples.
#pragma once

#include <array>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/device/number_format.h"
#include "distribute/device/tensor.h"

namespace distribute {

// All overloads are declared before any is defined, so that each finds the others for nested
// containers whatever their element types.
template <class T>
void print_value(std::ostream& os, const T& value);
template <class T, class A>
void print_value(std::ostream& os, const std::vector<T, A>& value);
template <class T, std::size_t N>
void print_value(std::ostream& os, const std::array<T, N>& value);
template <class K, class V, class C, class A>
void print_value(std::ostream& os, const std::map<K, V, C, A>& value);
template <class... Ts>
void print_value(std::ostream& os, const std::tuple<Ts...>& value);
template <class A, class B>
void print_value(std::ostream& os, const std::pair<A, B>& value);

namespace detail {

template <class Range>
void print_range(std::ostream& os, const Range& range) {
  os << '[';
  bool first = true;
  for (const auto& element : range) {
    if (!first) os << ", ";
    first = false;
    print_value(os, element);
  }
  os << ']';
}

}  // namespace detail

template <class T>
void print_value(std::ostream& os, const T& value) {
  if constexpr (std::is_arithmetic_v<T> || Element<T>) {
    os << format_number(value);
  } else {
    os << value;
  }
}

template <class T, class A>
void print_value(std::ostream& os, const std::vector<T, A>& value) {
  detail::print_range(os, value);
}

template <class T, std::size_t N>
void print_value(std::ostream& os, const std::array<T, N>& value) {
  detail::print_range(os, value);
}

template <class K, class V, class C, class A>
void print_value(std::ostream& os, const std::map<K, V, C, A>& value) {
  os << '{';
  bool first = true;
  for (const auto& [k, v] : value) {
    if (!first) os << ", ";
    first = false;
    os << '\'' << k << "': ";
    print_value(os, v);
  }
  os << '}';
}

template <class... Ts>
void print_value(std::ostream& os, const std::tuple<Ts...>& value) {
  os << '(';
  std::apply(
      [&](const auto&... e) {
        std::size_t i = 0;
        ((os << (i++ ? ", " : ""), print_value(os, e)), ...);
      },
      value);
  os << (sizeof...(Ts) == 1 ? ",)" : ")");
}

template <class A, class B>
void print_value(std::ostream& os, const std::pair<A, B>& value) {
  os << '(';
  print_value(os, value.first);
  os << ", ";
  print_value(os, value.second);
  os << ')';
}

}  // namespace distribute
