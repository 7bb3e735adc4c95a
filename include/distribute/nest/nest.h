// Functions over nests (see structure_traits.h): visiting the leaves in tf.nest's order, building
// a nest of the same structure with mapped leaves, and describing a structure for error messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "distribute/nest/structure_traits.h"

namespace distribute::nest {

// Calls f(leaf) for every leaf of v in order (depth first, maps by key).
template <class V, class F>
void for_each_leaf(const V& v, F&& f) {
  if constexpr (Leaf<V>) {
    f(v);
  } else {
    StructureTraits<V>::for_each(v, [&](const auto& child) { for_each_leaf(child, f); });
  }
}

// A copy of v's structure in which every leaf x is replaced by f(x) (which must have x's type).
template <class V, class F>
V map_leaves(const V& v, F&& f) {
  if constexpr (Leaf<V>) {
    return f(v);
  } else {
    return StructureTraits<V>::map(v, [&](const auto& child) { return map_leaves(child, f); });
  }
}

template <class V>
std::size_t num_leaves(const V& v) {
  std::size_t n = 0;
  for_each_leaf(v, [&](const auto&) { ++n; });
  return n;
}

// Whether container V names its children (dict keys, struct field names).
template <class V>
inline constexpr bool kKeyed = std::string_view(StructureTraits<V>::kName) == "dict" ||
                               std::string_view(StructureTraits<V>::kName) == "struct";

// The element type of a list or array whose children are all leaves (void otherwise).
template <class V>
struct LeafElement {
  using type = void;
};
template <Leaf T>
struct LeafElement<std::vector<T>> {
  using type = T;
};
template <Leaf T, std::size_t N>
struct LeafElement<std::array<T, N>> {
  using type = T;
};

// A hash of v's structure: container kinds, sizes, map keys and leaf kinds (not leaf values,
// dtypes or shapes). Equal structures hash equal.
template <class V>
std::uint64_t structure_hash(const V& v) {
  auto mix = [](std::uint64_t h, std::uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
  };
  if constexpr (std::same_as<V, Tensor>) {
    return 0x7e;
  } else if constexpr (Leaf<V>) {
    return 0x5c + static_cast<std::uint64_t>(dtype_v<V>);
  } else {
    const std::size_t size = StructureTraits<V>::size(v);
    std::uint64_t h = mix(std::hash<std::string_view>{}(StructureTraits<V>::kName), size);
    if constexpr (Leaf<typename LeafElement<V>::type>) {
      // Children of one leaf kind: the size and that kind say it all (a gradient list of
      // thousands of tensors is hashed on every all_reduce).
      return size == 0 ? h : mix(h, structure_hash(*std::begin(v)));
    } else {
      std::size_t i = 0;
      StructureTraits<V>::for_each(v, [&](const auto& child) {
        if constexpr (kKeyed<V>) h = mix(h, std::hash<std::string>{}(StructureTraits<V>::key(v, i++)));
        h = mix(h, structure_hash(child));
      });
      return h;
    }
  }
}

// A readable description of v's structure: "list[Tensor, Tensor]", "dict{a: Tensor, b: float32}".
template <class V>
std::string describe_structure(const V& v) {
  if constexpr (std::same_as<V, Tensor>) {
    return "Tensor";
  } else if constexpr (Leaf<V>) {
    return std::string(dtype_name(dtype_v<V>));
  } else {
    std::string out = std::string(StructureTraits<V>::kName) + (kKeyed<V> ? "{" : "[");
    std::size_t i = 0;
    StructureTraits<V>::for_each(v, [&](const auto& child) {
      if (i != 0) out += ", ";
      if (std::string key = StructureTraits<V>::key(v, i); !key.empty()) out += key + ": ";
      out += describe_structure(child);
      ++i;
    });
    return out + (kKeyed<V> ? "}" : "]");
  }
}

}  // namespace distribute::nest
