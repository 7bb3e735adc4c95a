// Printing of replica results and merge_call values: Tensors as TF prints them, scalars as they
// are, and containers like Python prints lists, tuples and dicts. Used by PerReplica/Mirrored's
// operator<< and by the examples.
#pragma once

#include <array>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "distribute/device/tensor.h"

namespace distribute {

template <class T>
void print_value(std::ostream& os, const T& value);

namespace detail {

template <class Range>
void print_range(std::ostream& os, const Range& range, const char* open, const char* close) {
  os << open;
  bool first = true;
  for (const auto& element : range) {
    if (!first) os << ", ";
    first = false;
    print_value(os, element);
  }
  os << close;
}

}  // namespace detail

template <class T>
void print_value(std::ostream& os, const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    os << (value ? "True" : "False");
  } else if constexpr (requires { detail::print_range(os, value, "[", "]"); } &&
                       !requires { os << value; }) {
    detail::print_range(os, value, "[", "]");
  } else {
    os << value;
  }
}

template <class K, class V>
void print_value(std::ostream& os, const std::map<K, V>& value) {
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
  std::apply([&](const auto&... e) {
    std::size_t i = 0;
    ((os << (i++ ? ", " : ""), print_value(os, e)), ...);
  }, value);
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
