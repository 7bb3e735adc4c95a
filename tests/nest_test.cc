// distribute::nest, the C++ counterpart of tf.nest: leaf order, map_leaves, num_leaves,
// structure_hash, describe_structure and the Nest concept, for the standard containers, user
// structs registered through StructFields (with and without member names) and nested mixes.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/distribute.h"

namespace nest_test_types {

struct Grads {
  distribute::Tensor w;
  distribute::Tensor b;
  std::int64_t examples = 0;
};

// Registered without names: visited in order, described without keys.
struct Point {
  float x = 0;
  double y = 0;
};

struct Unregistered {
  float x = 0;
};

}  // namespace nest_test_types

template <>
struct distribute::nest::StructFields<nest_test_types::Grads> {
  static constexpr auto members = std::make_tuple(&nest_test_types::Grads::w, &nest_test_types::Grads::b,
                                                  &nest_test_types::Grads::examples);
  static constexpr std::array<const char*, 3> names = {"w", "b", "examples"};
};

template <>
struct distribute::nest::StructFields<nest_test_types::Point> {
  static constexpr auto members = std::make_tuple(&nest_test_types::Point::x, &nest_test_types::Point::y);
};

namespace distribute {
namespace {

using nest_test_types::Grads;
using nest_test_types::Point;
using nest_test_types::Unregistered;

// "Tensor:[1, 2]" for a float32 tensor, "int32:7" for a scalar: the leaf kind and its values.
template <class V>
std::vector<std::string> leaf_texts(const V& v) {
  std::vector<std::string> out;
  nest::for_each_leaf(v, [&](const auto& leaf) {
    using L = std::decay_t<decltype(leaf)>;
    if constexpr (std::is_same_v<L, Tensor>) {
      std::string text = "Tensor:[";
      const std::vector<float> values = leaf.template to_vector<float>();
      for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(static_cast<int>(values[i]));
      out.push_back(text + "]");
    } else {
      out.push_back(std::string(dtype_name(dtype_v<L>)) + ":" + std::to_string(static_cast<int>(leaf)));
    }
  });
  return out;
}

Tensor vec(std::vector<float> values) { return Tensor::from_vector<float>(std::move(values)); }

// Replaces every leaf by the running count of leaves visited so far.
template <class V>
V number_leaves(const V& v) {
  int next = 0;
  return nest::map_leaves(v, [&](const auto& leaf) {
    using L = std::decay_t<decltype(leaf)>;
    if constexpr (std::is_same_v<L, Tensor>) {
      return Tensor::from_vector<float>({static_cast<float>(next++)});
    } else {
      return static_cast<L>(next++);
    }
  });
}

using Strings = std::vector<std::string>;

TEST(ForEachLeaf, LeavesAreVisitedThemselves) {
  EXPECT_EQ(leaf_texts(3.0f), Strings{"float32:3"});
  EXPECT_EQ(leaf_texts(std::int64_t{4}), Strings{"int64:4"});
  EXPECT_EQ(leaf_texts(vec({1, 2})), Strings{"Tensor:[1, 2]"});
}

TEST(ForEachLeaf, ContainersInOrder) {
  EXPECT_EQ(leaf_texts(std::vector<std::int32_t>{3, 1, 2}), (Strings{"int32:3", "int32:1", "int32:2"}));
  EXPECT_EQ(leaf_texts(std::array<double, 2>{5, 6}), (Strings{"float64:5", "float64:6"}));
  EXPECT_EQ(leaf_texts(std::pair<float, Tensor>{1, vec({2})}), (Strings{"float32:1", "Tensor:[2]"}));
  EXPECT_EQ(leaf_texts(std::tuple<std::int32_t, Tensor, double>{1, vec({2, 3}), 4}),
            (Strings{"int32:1", "Tensor:[2, 3]", "float64:4"}));
  EXPECT_TRUE(leaf_texts(std::vector<Tensor>{}).empty());
}

TEST(ForEachLeaf, MapsInKeyOrderLikeDicts) {
  const std::map<std::string, std::int32_t> m{{"b", 2}, {"c", 3}, {"a", 1}};
  EXPECT_EQ(leaf_texts(m), (Strings{"int32:1", "int32:2", "int32:3"}));
}

TEST(ForEachLeaf, RegisteredStructsInMemberOrder) {
  EXPECT_EQ(leaf_texts(Grads{vec({1, 2}), vec({3}), 32}), (Strings{"Tensor:[1, 2]", "Tensor:[3]", "int64:32"}));
  EXPECT_EQ(leaf_texts(Point{7, 8}), (Strings{"float32:7", "float64:8"}));
}

TEST(ForEachLeaf, NestedDepthFirst) {
  using Nested = std::tuple<std::map<std::string, std::vector<Tensor>>, std::pair<Point, std::int32_t>,
                            std::vector<std::array<float, 2>>>;
  const Nested n{{{"z", {vec({1})}}, {"a", {vec({2}), vec({3})}}}, {Point{4, 5}, 6}, {{7, 8}, {9, 10}}};
  EXPECT_EQ(leaf_texts(n), (Strings{"Tensor:[2]", "Tensor:[3]", "Tensor:[1]", "float32:4", "float64:5",
                                    "int32:6", "float32:7", "float32:8", "float32:9", "float32:10"}));
}

TEST(MapLeaves, KeepsTheStructureAndTheOriginal) {
  const std::map<std::string, std::vector<double>> m{{"a", {1, 2}}, {"b", {3}}};
  const auto doubled = nest::map_leaves(m, [](double x) { return 2 * x; });
  EXPECT_EQ(doubled, (std::map<std::string, std::vector<double>>{{"a", {2, 4}}, {"b", {6}}}));
  EXPECT_EQ(m.at("a"), (std::vector<double>{1, 2}));

  const Grads g{vec({1, 2}), vec({3}), 5};
  const Grads scaled = nest::map_leaves(g, [](const auto& leaf) {
    using L = std::decay_t<decltype(leaf)>;
    if constexpr (std::is_same_v<L, Tensor>) {
      Tensor out = leaf.clone();
      out.template flat<float>() *= 10.0f;
      return out;
    } else {
      return static_cast<L>(leaf + 1);
    }
  });
  EXPECT_EQ(leaf_texts(scaled), (Strings{"Tensor:[10, 20]", "Tensor:[30]", "int64:6"}));
  EXPECT_EQ(leaf_texts(g), (Strings{"Tensor:[1, 2]", "Tensor:[3]", "int64:5"}));
}

// map_leaves calls f in the order for_each_leaf visits, for every kind of container.
TEST(MapLeaves, VisitsInLeafOrder) {
  using Nested = std::tuple<std::pair<float, Tensor>, std::array<std::int32_t, 3>,
                            std::map<std::string, double>, Point, std::vector<Grads>>;
  const Nested n{{0, vec({0})}, {0, 0, 0}, {{"b", 0}, {"a", 0}}, Point{}, {Grads{vec({0}), vec({0}), 0}}};
  EXPECT_EQ(leaf_texts(number_leaves(n)),
            (Strings{"float32:0", "Tensor:[1]", "int32:2", "int32:3", "int32:4", "float64:5", "float64:6",
                     "float32:7", "float64:8", "Tensor:[9]", "Tensor:[10]", "int64:11"}));
}

TEST(NumLeaves, CountsEveryLeaf) {
  EXPECT_EQ(nest::num_leaves(1.0f), 1u);
  EXPECT_EQ(nest::num_leaves(vec({1, 2, 3})), 1u);
  EXPECT_EQ(nest::num_leaves(std::vector<float>{}), 0u);
  EXPECT_EQ(nest::num_leaves(std::map<std::string, Tensor>{}), 0u);
  EXPECT_EQ(nest::num_leaves(std::vector<std::vector<float>>{{1, 2}, {}, {3}}), 3u);
  EXPECT_EQ(nest::num_leaves(std::tuple<Point, std::array<Tensor, 2>, std::pair<int, int>>{}), 6u);
  EXPECT_EQ(nest::num_leaves(Grads{}), 3u);
}

TEST(StructureHash, EqualForEqualStructures) {
  // Values, tensor dtypes and tensor shapes are not part of the structure.
  EXPECT_EQ(nest::structure_hash(std::vector<float>{1, 2}), nest::structure_hash(std::vector<float>{3, 4}));
  EXPECT_EQ(nest::structure_hash(vec({1, 2, 3})), nest::structure_hash(Tensor::scalar<std::int64_t>(1)));
  const std::map<std::string, Tensor> a{{"x", vec({1})}, {"y", vec({2})}};
  const std::map<std::string, Tensor> b{{"y", Tensor::scalar(5.0)}, {"x", vec({3, 4})}};
  EXPECT_EQ(nest::structure_hash(a), nest::structure_hash(b));
  EXPECT_EQ(nest::structure_hash(Grads{vec({1}), vec({2}), 3}), nest::structure_hash(Grads{}));
  using Nested = std::tuple<std::vector<Point>, std::pair<Tensor, double>>;
  EXPECT_EQ(nest::structure_hash(Nested{{Point{1, 2}}, {vec({1}), 1}}),
            nest::structure_hash(Nested{{Point{3, 4}}, {vec({5, 6}), 7}}));
}

TEST(StructureHash, DiffersForDifferentStructures) {
  using nest::structure_hash;
  const std::vector<std::uint64_t> hashes = {
      structure_hash(std::vector<float>{1, 2}),
      structure_hash(std::vector<float>{1, 2, 3}),
      structure_hash(std::vector<float>{}),
      structure_hash(std::array<float, 2>{1, 2}),
      structure_hash(std::tuple<float, float>{1, 2}),
      structure_hash(std::pair<float, float>{1, 2}),
      structure_hash(std::vector<Tensor>{vec({1}), vec({2})}),
      structure_hash(std::vector<double>{1, 2}),
      structure_hash(std::map<std::string, float>{{"a", 1}, {"b", 2}}),
      structure_hash(std::map<std::string, float>{{"a", 1}, {"c", 2}}),
      structure_hash(std::map<std::string, float>{{"a", 1}}),
      structure_hash(std::vector<std::vector<float>>{{1}, {2, 3}}),
      structure_hash(std::vector<std::vector<float>>{{1, 2}, {3}}),
      structure_hash(Point{}),
      structure_hash(std::map<std::string, Tensor>{{"w", vec({1})}, {"b", vec({2})}}),
      structure_hash(std::tuple<Tensor, Tensor>{}),
      structure_hash(Tensor::scalar(1.0f)),
      structure_hash(1.0f),
      structure_hash(1.0),
      structure_hash(std::int32_t{1}),
      structure_hash(std::int64_t{1}),
  };
  EXPECT_EQ(std::set<std::uint64_t>(hashes.begin(), hashes.end()).size(), hashes.size());
}

TEST(DescribeStructure, Leaves) {
  EXPECT_EQ(nest::describe_structure(vec({1})), "Tensor");
  EXPECT_EQ(nest::describe_structure(1.0f), "float32");
  EXPECT_EQ(nest::describe_structure(1.0), "float64");
  EXPECT_EQ(nest::describe_structure(std::int32_t{1}), "int32");
  EXPECT_EQ(nest::describe_structure(std::int64_t{1}), "int64");
}

TEST(DescribeStructure, Containers) {
  EXPECT_EQ(nest::describe_structure(std::vector<Tensor>{vec({1}), vec({2})}), "list[Tensor, Tensor]");
  EXPECT_EQ(nest::describe_structure(std::vector<float>{}), "list[]");
  EXPECT_EQ(nest::describe_structure(std::array<std::int64_t, 2>{}), "array[int64, int64]");
  EXPECT_EQ(nest::describe_structure(std::pair<float, Tensor>{1, vec({1})}), "pair[float32, Tensor]");
  EXPECT_EQ(nest::describe_structure(std::tuple<std::int32_t, double, Tensor>{1, 2, vec({1})}),
            "tuple[int32, float64, Tensor]");
  EXPECT_EQ(nest::describe_structure(std::map<std::string, Tensor>{}), "dict{}");
  EXPECT_EQ((nest::describe_structure(std::map<std::string, std::vector<float>>{{"b", {1}}, {"a", {}}})),
            "dict{a: list[], b: list[float32]}");
  EXPECT_EQ(nest::describe_structure(Grads{vec({1}), vec({2}), 3}), "struct{w: Tensor, b: Tensor, examples: int64}");
  EXPECT_EQ(nest::describe_structure(Point{}), "struct{float32, float64}");
}

TEST(DescribeStructure, Nested) {
  const std::vector<std::map<std::string, std::pair<Tensor, std::array<float, 1>>>> v = {
      {{"x", {vec({1}), {2}}}}, {}};
  EXPECT_EQ(nest::describe_structure(v), "list[dict{x: pair[Tensor, array[float32]]}, dict{}]");
  const std::tuple<Point, std::vector<Grads>> t{Point{}, {Grads{}}};
  EXPECT_EQ(nest::describe_structure(t),
            "tuple[struct{float32, float64}, list[struct{w: Tensor, b: Tensor, examples: int64}]]");
}

// The concepts the collective calls use to accept or reject a value at compile time.
static_assert(nest::Leaf<Tensor>);
static_assert(nest::Leaf<float> && nest::Leaf<double> && nest::Leaf<std::int32_t> && nest::Leaf<std::int64_t>);
static_assert(!nest::Leaf<bool> && !nest::Leaf<char> && !nest::Leaf<std::uint64_t> && !nest::Leaf<std::string>);
static_assert(!nest::Leaf<std::vector<float>>);
static_assert(nest::Container<std::vector<Tensor>> && nest::Container<Grads> && nest::Container<Point>);
static_assert(!nest::Container<Tensor> && !nest::Container<float> && !nest::Container<Unregistered>);

static_assert(nest::Nest<Tensor>);
static_assert(nest::Nest<float>);
static_assert(nest::Nest<std::int64_t>);
static_assert(nest::Nest<std::vector<Tensor>>);
static_assert(nest::Nest<std::array<double, 3>>);
static_assert(nest::Nest<std::pair<Tensor, float>>);
static_assert(nest::Nest<std::tuple<>>);
static_assert(nest::Nest<std::tuple<Tensor, std::int32_t, std::vector<double>>>);
static_assert(nest::Nest<std::map<std::string, std::vector<Tensor>>>);
static_assert(nest::Nest<Grads>);
static_assert(nest::Nest<Point>);
static_assert(nest::Nest<std::vector<std::map<std::string, std::tuple<Grads, std::array<Point, 2>>>>>);

static_assert(!nest::Nest<bool>);
static_assert(!nest::Nest<std::string>);
static_assert(!nest::Nest<std::uint32_t>);
static_assert(!nest::Nest<Unregistered>);
static_assert(!nest::Nest<std::vector<bool>>);
static_assert(!nest::Nest<std::vector<std::string>>);
static_assert(!nest::Nest<std::map<int, Tensor>>);
static_assert(!nest::Nest<std::pair<Tensor, std::string>>);
static_assert(!nest::Nest<std::tuple<Tensor, Unregistered>>);
static_assert(!nest::Nest<std::vector<std::vector<char>>>);
static_assert(!nest::Nest<std::map<std::string, std::array<Unregistered, 1>>>);
static_assert(!nest::Nest<PerReplica<Tensor>>);

}  // namespace
}  // namespace distribute
