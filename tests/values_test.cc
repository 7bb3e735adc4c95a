// PerReplica / Mirrored: construction, access, range and emptiness errors, the Distributed concept,
// TF-style printing with tensor, scalar and container components, and print_value itself.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/semantics_util.h"

namespace distribute {
namespace {

using testing::expect_error;
using testing::printed;

template <class V>
std::string value_text(const V& v) {
  std::ostringstream os;
  print_value(os, v);
  return os.str();
}

TEST(PerReplica, HoldsOneValuePerReplica) {
  const PerReplica<int> v({10, 20, 30});
  EXPECT_EQ(v.num_replicas(), 3);
  EXPECT_EQ(v.values(), (std::vector<int>{10, 20, 30}));
  EXPECT_EQ(v[0], 10);
  EXPECT_EQ(v[1], 20);
  EXPECT_EQ(v[2], 30);
  const PerReplica<int> one({7});
  EXPECT_EQ(one.num_replicas(), 1);
  EXPECT_EQ(one[0], 7);
}

TEST(PerReplica, TensorComponentsAreTheSameObjects) {
  const Tensor a = Tensor::scalar<float>(1);
  const Tensor b = Tensor::scalar<float>(2);
  const PerReplica<Tensor> v({a, b});
  EXPECT_TRUE(v[0].same_storage(a));
  EXPECT_TRUE(v[1].same_storage(b));
  EXPECT_EQ(v.values().size(), 2u);
}

TEST(PerReplica, IndexOutOfRange) {
  const PerReplica<int> v({1, 2});
  expect_error<OutOfRangeError>([&] { (void)v[2]; }, {"replica 2 does not exist", "have 2 replicas"});
  expect_error<OutOfRangeError>([&] { (void)v[-1]; }, {"replica -1 does not exist", "have 2 replicas"});
  const Mirrored<float> m(1.0f, 3);
  expect_error<OutOfRangeError>([&] { (void)m[3]; }, {"replica 3 does not exist", "have 3 replicas"});
}

TEST(PerReplica, EmptyListIsRejected) {
  expect_error<InvalidArgumentError>([] { PerReplica<int> v(std::vector<int>{}); },
                                          {"one value per replica", "empty"});
  expect_error<InvalidArgumentError>([] { Mirrored<Tensor> v(std::vector<Tensor>{}); },
                                          {"one value per replica", "empty"});
  expect_error<InvalidArgumentError>([] { Mirrored<float> v(1.0f, 0); }, {"one value per replica"});
  expect_error<InvalidArgumentError>([] { Mirrored<float> v(1.0f, -2); }, {"one value per replica"});
}

TEST(Mirrored, SameValueOnEveryReplica) {
  const Tensor t = Tensor::from_vector<std::int32_t>({1, 2});
  const Mirrored<Tensor> m(t, 4);
  EXPECT_EQ(m.num_replicas(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(m[i].same_storage(t)) << i;
  }
  const Mirrored<double> from_list(std::vector<double>{0.5, 0.5});
  EXPECT_EQ(from_list.num_replicas(), 2);
  EXPECT_EQ(from_list.values(), (std::vector<double>{0.5, 0.5}));
  const DistributedValues<double>& base = from_list;
  EXPECT_EQ(base[1], 0.5);
}

// Constructible from a braced list of the components, the way PerReplica is.
template <class V>
concept BracedListConstructible = requires { V({typename V::value_type{}, typename V::value_type{}}); };

TEST(Mirrored, ConstructibleFromABracedList) {
  EXPECT_TRUE(BracedListConstructible<PerReplica<double>>);
  EXPECT_TRUE(BracedListConstructible<PerReplica<int>>);
  EXPECT_TRUE(BracedListConstructible<Mirrored<Tensor>>);
  // Mirrored's (value, num_replicas) constructor must not make these ambiguous.
  EXPECT_TRUE(BracedListConstructible<Mirrored<double>>);
  EXPECT_TRUE(BracedListConstructible<Mirrored<int>>);
}

// std::vector<bool> hands out proxies, not references: indexing must still give the values.
TEST(PerReplica, BoolComponents) {
  const PerReplica<bool> v({true, false, true});
  EXPECT_EQ(v.num_replicas(), 3);
  EXPECT_TRUE(v[0]);
  EXPECT_FALSE(v[1]);
  EXPECT_TRUE(v[2]);
  EXPECT_EQ(printed(v), "PerReplica:{\n  0: True,\n  1: False,\n  2: True\n}");
}

TEST(DistributedPrint, PerReplicaOfTensors) {
  const PerReplica<Tensor> v({Tensor::scalar<std::int32_t>(0), Tensor::scalar<std::int32_t>(1)});
  EXPECT_EQ(printed(v),
            "PerReplica:{\n"
            "  0: <Tensor: shape=(), dtype=int32, numpy=0>,\n"
            "  1: <Tensor: shape=(), dtype=int32, numpy=1>\n"
            "}");
  const PerReplica<Tensor> one({Tensor::from_vector<float>({5})});
  EXPECT_EQ(printed(one), "PerReplica:{\n  0: <Tensor: shape=(1,), dtype=float32, numpy=[5.0]>\n}");
}

TEST(DistributedPrint, MirroredOfTensors) {
  const Mirrored<Tensor> m(Tensor::from_vector<std::int32_t>({1, 2, 3}), 3);
  EXPECT_EQ(printed(m),
            "Mirrored:{\n"
            "  0: <Tensor: shape=(3,), dtype=int32, numpy=[1, 2, 3]>,\n"
            "  1: <Tensor: shape=(3,), dtype=int32, numpy=[1, 2, 3]>,\n"
            "  2: <Tensor: shape=(3,), dtype=int32, numpy=[1, 2, 3]>\n"
            "}");
}

TEST(DistributedPrint, ScalarComponents) {
  EXPECT_EQ(printed(PerReplica<int>({3, -4})), "PerReplica:{\n  0: 3,\n  1: -4\n}");
  EXPECT_EQ(printed(Mirrored<std::int64_t>(std::int64_t{9}, 2)), "Mirrored:{\n  0: 9,\n  1: 9\n}");
  EXPECT_EQ(printed(PerReplica<float>({0.5f, 0.25f})), "PerReplica:{\n  0: 0.5,\n  1: 0.25\n}");
  const DistributedValues<int>& base = PerReplica<int>({1});
  EXPECT_EQ(printed(base), "DistributedValues:{\n  0: 1\n}");
}

// Floating scalars print like Python floats, as float tensors do: "2.0", and every digit needed
// to read the value back.
TEST(DistributedPrint, FloatScalarsPrintLikePython) {
  EXPECT_EQ(printed(PerReplica<float>({2.0f, 3.0f})), "PerReplica:{\n  0: 2.0,\n  1: 3.0\n}");
  EXPECT_EQ(printed(PerReplica<double>({1234567.0, 0.1 + 0.2})),
            "PerReplica:{\n  0: 1234567.0,\n  1: 0.30000000000000004\n}");
}

TEST(DistributedPrint, ContainerComponents) {
  EXPECT_EQ(printed(PerReplica<std::vector<int>>({{1, 2}, {}})), "PerReplica:{\n  0: [1, 2],\n  1: []\n}");
  EXPECT_EQ(printed(Mirrored<std::tuple<int, Tensor>>(std::tuple<int, Tensor>{1, Tensor::scalar<std::int32_t>(2)}, 2)),
            "Mirrored:{\n"
            "  0: (1, <Tensor: shape=(), dtype=int32, numpy=2>),\n"
            "  1: (1, <Tensor: shape=(), dtype=int32, numpy=2>)\n"
            "}");
  EXPECT_EQ(printed(PerReplica<std::map<std::string, int>>({{{"a", 1}, {"b", 2}}, {{"a", 3}}})),
            "PerReplica:{\n  0: {'a': 1, 'b': 2},\n  1: {'a': 3}\n}");
  EXPECT_EQ(printed(PerReplica<std::vector<Tensor>>({{Tensor::scalar<std::int32_t>(0)}, {}})),
            "PerReplica:{\n  0: [<Tensor: shape=(), dtype=int32, numpy=0>],\n  1: []\n}");
}

TEST(PrintValue, ScalarsAndTensors) {
  EXPECT_EQ(value_text(7), "7");
  EXPECT_EQ(value_text(true), "True");
  EXPECT_EQ(value_text(false), "False");
  EXPECT_EQ(value_text(std::string("x")), "x");
  EXPECT_EQ(value_text(Tensor::scalar<std::int64_t>(3)), "<Tensor: shape=(), dtype=int64, numpy=3>");
}

TEST(PrintValue, ListsTuplesAndDictsLikePython) {
  EXPECT_EQ(value_text(std::vector<int>{1, 2, 3}), "[1, 2, 3]");
  EXPECT_EQ(value_text(std::vector<int>{}), "[]");
  EXPECT_EQ(value_text(std::vector<bool>{true, false}), "[True, False]");
  EXPECT_EQ(value_text(std::vector<std::vector<int>>{{1}, {2, 3}, {}}), "[[1], [2, 3], []]");
  EXPECT_EQ(value_text(std::array<int, 2>{4, 5}), "[4, 5]");
  EXPECT_EQ(value_text(std::tuple<int>{1}), "(1,)");
  EXPECT_EQ(value_text(std::tuple<>{}), "()");
  EXPECT_EQ(value_text(std::tuple<int, bool, std::vector<int>>{1, true, {2}}), "(1, True, [2])");
  EXPECT_EQ(value_text(std::pair<int, std::string>{1, "a"}), "(1, a)");
  EXPECT_EQ(value_text(std::map<std::string, int>{{"b", 2}, {"a", 1}}), "{'a': 1, 'b': 2}");
  EXPECT_EQ(value_text(std::map<std::string, int>{}), "{}");
  EXPECT_EQ(value_text(std::map<std::string, std::map<std::string, std::vector<int>>>{{"x", {{"y", {1}}}}}),
            "{'x': {'y': [1]}}");
  EXPECT_EQ(value_text(std::vector<std::tuple<Tensor, int>>{{Tensor::scalar<std::int32_t>(1), 2}}),
            "[(<Tensor: shape=(), dtype=int32, numpy=1>, 2)]");
  EXPECT_EQ(value_text(std::map<std::string, std::tuple<int, Tensor>>{{"k", {1, Tensor::scalar<std::int32_t>(2)}}}),
            "{'k': (1, <Tensor: shape=(), dtype=int32, numpy=2>)}");
}

// The concept Strategy::run uses to pick the arguments it splits per replica.
static_assert(Distributed<PerReplica<Tensor>>);
static_assert(Distributed<Mirrored<float>>);
static_assert(Distributed<DistributedValues<int>>);
static_assert(Distributed<const PerReplica<Tensor>&>);
static_assert(Distributed<Mirrored<std::vector<Tensor>>&&>);
static_assert(!Distributed<Tensor>);
static_assert(!Distributed<float>);
static_assert(!Distributed<std::vector<PerReplica<Tensor>>>);
static_assert(!Distributed<const std::vector<Tensor>&>);
static_assert(std::is_base_of_v<DistributedValues<int>, PerReplica<int>>);
static_assert(std::is_base_of_v<DistributedValues<int>, Mirrored<int>>);
static_assert(std::is_same_v<PerReplica<Tensor>::value_type, Tensor>);

}  // namespace
}  // namespace distribute
