// The C++ counterpart of tf.nest's structures. A nest is a leaf (a Tensor or an arithmetic scalar
// of a tensor element type) or a container of nests: std::vector, std::array, std::pair,
// std::tuple, std::map<std::string, .>, or a user aggregate registered with StructFields:
//
//   struct Grads { Tensor w; Tensor b; };
//   template <> struct distribute::nest::StructFields<Grads> {
//     static constexpr auto members = std::make_tuple(&Grads::w, &Grads::b);
//     static constexpr std::array<const char*, 2> names = {"w", "b"};
//   };
//
// StructureTraits<C> says how to visit the children of container C in order (for_each), how to
// build a C of the same shape from mapped children (map), and how to name it in messages.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/device/dtype.h"
#include "distribute/device/tensor.h"

namespace distribute::nest {

// Scalars that can stand as leaves: the C++ types of the tensor element types.
template <class T>
concept ScalarLeaf = std::is_arithmetic_v<T> && Element<T>;

template <class T>
concept Leaf = std::same_as<T, Tensor> || ScalarLeaf<T>;

// Specialise for a user aggregate: `members` is a tuple of member pointers, `names` their names.
template <class T>
struct StructFields;

template <class T, class Enable = void>
struct StructureTraits;  // undefined: T is not a nest container

namespace internal {
// Stands for f(child) where a container makes its element: converted there, the result is made
// in place rather than made, moved in and destroyed (a collective's output list makes one per
// leaf on every step).
template <class F, class C>
struct MappedChild {
  F& f;
  const C& child;
  operator std::invoke_result_t<F&, const C&>() const { return f(child); }
};
}  // namespace internal

template <class T>
struct StructureTraits<std::vector<T>> {
  static constexpr const char* kName = "list";
  static std::size_t size(const std::vector<T>& v) { return v.size(); }
  template <class F>
  static void for_each(const std::vector<T>& v, F&& f) {
    for (const T& child : v) f(child);
  }
  template <class F>
  static std::vector<T> map(const std::vector<T>& v, F&& f) {
    std::vector<T> out;
    out.reserve(v.size());
    for (const T& child : v) out.emplace_back(internal::MappedChild<F, T>{f, child});
    return out;
  }
  static std::string key(const std::vector<T>&, std::size_t) { return {}; }
};

template <class T, std::size_t N>
struct StructureTraits<std::array<T, N>> {
  static constexpr const char* kName = "array";
  static std::size_t size(const std::array<T, N>&) { return N; }
  template <class F>
  static void for_each(const std::array<T, N>& v, F&& f) {
    for (const T& child : v) f(child);
  }
  template <class F>
  static std::array<T, N> map(const std::array<T, N>& v, F&& f) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::array<T, N>{f(v[I])...};
    }(std::make_index_sequence<N>{});
  }
  static std::string key(const std::array<T, N>&, std::size_t) { return {}; }
};

template <class... Ts>
struct StructureTraits<std::tuple<Ts...>> {
  static constexpr const char* kName = "tuple";
  static std::size_t size(const std::tuple<Ts...>&) { return sizeof...(Ts); }
  template <class F>
  static void for_each(const std::tuple<Ts...>& v, F&& f) {
    std::apply([&](const auto&... child) { (f(child), ...); }, v);
  }
  template <class F>
  static std::tuple<Ts...> map(const std::tuple<Ts...>& v, F&& f) {
    // Braced initialisation evaluates the children left to right, as for_each visits them.
    return std::apply([&](const auto&... child) { return std::tuple<Ts...>{f(child)...}; }, v);
  }
  static std::string key(const std::tuple<Ts...>&, std::size_t) { return {}; }
};

template <class A, class B>
struct StructureTraits<std::pair<A, B>> {
  static constexpr const char* kName = "pair";
  static std::size_t size(const std::pair<A, B>&) { return 2; }
  template <class F>
  static void for_each(const std::pair<A, B>& v, F&& f) {
    f(v.first);
    f(v.second);
  }
  template <class F>
  static std::pair<A, B> map(const std::pair<A, B>& v, F&& f) {
    A first = f(v.first);
    B second = f(v.second);
    return {std::move(first), std::move(second)};
  }
  static std::string key(const std::pair<A, B>&, std::size_t) { return {}; }
};

// Maps are visited in key order, as tf.nest visits dicts in sorted key order.
template <class T>
struct StructureTraits<std::map<std::string, T>> {
  static constexpr const char* kName = "dict";
  static std::size_t size(const std::map<std::string, T>& v) { return v.size(); }
  template <class F>
  static void for_each(const std::map<std::string, T>& v, F&& f) {
    for (const auto& [k, child] : v) f(child);
  }
  template <class F>
  static std::map<std::string, T> map(const std::map<std::string, T>& v, F&& f) {
    std::map<std::string, T> out;
    for (const auto& [k, child] : v) out.emplace_hint(out.end(), k, f(child));
    return out;
  }
  static std::string key(const std::map<std::string, T>& v, std::size_t i) {
    auto it = v.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(i));
    return it->first;
  }
};

template <class T>
struct StructureTraits<T, std::void_t<decltype(StructFields<T>::members)>> {
  static constexpr const char* kName = "struct";
  static constexpr std::size_t kSize = std::tuple_size_v<std::decay_t<decltype(StructFields<T>::members)>>;
  static std::size_t size(const T&) { return kSize; }
  template <class F>
  static void for_each(const T& v, F&& f) {
    std::apply([&](auto... member) { (f(v.*member), ...); }, StructFields<T>::members);
  }
  template <class F>
  static T map(const T& v, F&& f) {
    T out = v;
    std::apply([&](auto... member) { ((out.*member = f(v.*member)), ...); }, StructFields<T>::members);
    return out;
  }
  static std::string key(const T&, std::size_t i) {
    if constexpr (requires { StructFields<T>::names; }) {
      return StructFields<T>::names[i];
    } else {
      return {};
    }
  }
};

template <class T>
concept Container = requires { StructureTraits<T>::kName; };

// Whether every leaf type L of the nest type T has Pred<L>::value: for a leaf, Pred<T>; for a
// container, every child's type (for a registered struct, every member's).
template <class T, template <class> class Pred>
struct AllLeaves : Pred<T> {};
template <class T, template <class> class Pred>
struct AllLeaves<std::vector<T>, Pred> : AllLeaves<T, Pred> {};
template <class T, std::size_t N, template <class> class Pred>
struct AllLeaves<std::array<T, N>, Pred> : AllLeaves<T, Pred> {};
template <class... Ts, template <class> class Pred>
struct AllLeaves<std::tuple<Ts...>, Pred> : std::bool_constant<(AllLeaves<Ts, Pred>::value && ...)> {};
template <class A, class B, template <class> class Pred>
struct AllLeaves<std::pair<A, B>, Pred> : std::bool_constant<AllLeaves<A, Pred>::value && AllLeaves<B, Pred>::value> {};
template <class T, template <class> class Pred>
struct AllLeaves<std::map<std::string, T>, Pred> : AllLeaves<T, Pred> {};

namespace internal {
template <class Members, template <class> class Pred>
struct AllMembers;
template <class... Cs, class... Ms, template <class> class Pred>
struct AllMembers<std::tuple<Ms Cs::*...>, Pred> : std::bool_constant<(AllLeaves<Ms, Pred>::value && ...)> {};
}  // namespace internal

template <class T, template <class> class Pred>
  requires requires { StructFields<T>::members; }
struct AllLeaves<T, Pred> : internal::AllMembers<std::remove_cv_t<decltype(StructFields<T>::members)>, Pred> {};

template <class T>
struct IsLeaf : std::bool_constant<Leaf<T>> {};

// A type that the nest functions accept: a leaf or a container whose children are nests.
template <class T>
concept Nest = AllLeaves<T, IsLeaf>::value;

}  // namespace distribute::nest
