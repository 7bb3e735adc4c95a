// ReplicaContext::all_reduce and all_gather on CPU replicas: SUM and MEAN for every dtype on tensors
// of many shapes (empty and large ones included), on scalars and on nests (std containers, nested
// and mixed-dtype ones, a user aggregate registered with StructFields); string op names; integer
// MEAN truncation; all_gather along every axis with uneven per-replica sizes. Its property test is
// in collectives_test_property.cc.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/collective_reference.h"
#include "testing/replica_harness.h"
#include "testing/semantics_util.h"

namespace distribute {
namespace {

// A user aggregate taking part in collectives as a nest.
struct Grads {
  Tensor w;
  Tensor b;
  double scale = 0;
};

// A user aggregate registered without member names.
struct Layer {
  Tensor kernel;
  Tensor bias;
};

}  // namespace

namespace nest {
template <>
struct StructFields<Grads> {
  static constexpr auto members = std::make_tuple(&Grads::w, &Grads::b, &Grads::scale);
  static constexpr std::array<const char*, 3> names = {"w", "b", "scale"};
};
template <>
struct StructFields<Layer> {
  static constexpr auto members = std::make_tuple(&Layer::kernel, &Layer::bias);
};
}  // namespace nest

namespace {

using testing::as_doubles;
using testing::backend_label;
using testing::concat_reference;
using testing::cpu_devices;
using testing::mean_of;
using testing::tensor_of;
using testing::to_doubles;

// ---------------------------------------------------------------------------------------------
// all_reduce of tensors, every dtype.

template <class T>
class AllReduceTyped : public ::testing::Test {};

using ElementTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, Half, BFloat16>;

class ElementTypeNames {
 public:
  template <class T>
  static std::string GetName(int) {
    return dtype_name(dtype_v<T>);
  }
};

TYPED_TEST_SUITE(AllReduceTyped, ElementTypes, ElementTypeNames);

// Replica r's element i: small integers, exact in every dtype, different on each replica.
std::int64_t element(int r, std::int64_t i) { return (i * 7 + r * 3) % 11 - 5; }

TYPED_TEST(AllReduceTyped, SumAndMeanOverShapes) {
  const DType dtype = dtype_v<TypeParam>;
  const std::vector<Shape> shapes{Shape{}, Shape{0}, Shape{1}, Shape{5}, Shape{2, 3}, Shape{2, 0, 3},
                                  Shape{3, 1, 4}, Shape{17, 33}, Shape{100003}};
  for (int n : {1, 2, 3, 4}) {
    MirroredStrategy strategy(cpu_devices(n));
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(::testing::Message() << n << " replicas, shape " << shape);
      auto result = strategy.run([&] {
        const int r = get_replica_context()->replica_id_in_sync_group();
        std::vector<std::int64_t> values;
        for (std::int64_t i = 0; i < shape.num_elements(); ++i) values.push_back(element(r, i));
        Tensor mine = tensor_of(dtype, values, shape);
        return std::make_pair(get_replica_context()->all_reduce(ReduceOp::kSum, mine),
                              get_replica_context()->all_reduce(ReduceOp::kMean, mine));
      });
      std::vector<double> sums;
      std::vector<double> means;
      for (std::int64_t i = 0; i < shape.num_elements(); ++i) {
        std::int64_t sum = 0;
        for (int r = 0; r < n; ++r) sum += element(r, i);
        sums.push_back(static_cast<double>(sum));
        means.push_back(mean_of(dtype, sum, n));
      }
      for (int r = 0; r < n; ++r) {
        const auto& [sum, mean] = result[r];
        EXPECT_EQ(sum.dtype(), dtype);
        EXPECT_EQ(sum.shape(), shape);
        EXPECT_EQ(mean.shape(), shape);
        EXPECT_EQ(sum.device(), Device::cpu(r));
        EXPECT_EQ(to_doubles(sum), sums) << "replica " << r;
        EXPECT_EQ(to_doubles(mean), means) << "replica " << r;
      }
    }
  }
}

// The input stays untouched and the output is a new tensor.
TYPED_TEST(AllReduceTyped, InputIsNotModified) {
  const DType dtype = dtype_v<TypeParam>;
  MirroredStrategy strategy(cpu_devices(3));
  auto result = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Tensor mine = tensor_of(dtype, {r, r + 1, r + 2}, Shape{3});
    Tensor out = get_replica_context()->all_reduce(ReduceOp::kSum, mine);
    return std::make_tuple(to_doubles(mine), out.same_storage(mine));
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(std::get<0>(result[r]), (std::vector<double>{double(r), double(r + 1), double(r + 2)}));
    EXPECT_FALSE(std::get<1>(result[r]));
  }
}

// ---------------------------------------------------------------------------------------------
// Scalars, op names, integer MEAN.

// Both backends that serve CPU replicas run every test: shared memory (kAuto) and the
// reduction to one device, whose code is the same that GPU replicas run.
class Collectives : public ::testing::TestWithParam<std::tuple<int, CrossDeviceOps>> {
 protected:
  int n() const { return std::get<0>(GetParam()); }
  MirroredStrategyOptions options() const {
    MirroredStrategyOptions o;
    o.cross_device_ops = std::get<1>(GetParam());
    return o;
  }
  // 0 + 1 + ... + n-1
  int ids_sum() const { return n() * (n() - 1) / 2; }
};

INSTANTIATE_TEST_SUITE_P(Replicas, Collectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(CrossDeviceOps::kAuto,
                                                              CrossDeviceOps::kReductionToOneDevice)),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "replicas" +
                                  backend_label(std::get<1>(p.param));
                         });

TEST_P(Collectives, AllReduceScalars) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  auto result = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    return std::make_tuple(ctx.all_reduce(ReduceOp::kSum, 0.5f + float(r)), ctx.all_reduce(ReduceOp::kMean, double(r)),
                           ctx.all_reduce(ReduceOp::kSum, std::int32_t{r}),
                           ctx.all_reduce(ReduceOp::kMean, std::int64_t{10 * r}),
                           ctx.all_reduce(ReduceOp::kSum, std::int64_t{1} << 40));
  });
  for (int r = 0; r < n(); ++r) {
    const auto& [f, d, i32, i64, big] = result[r];
    EXPECT_EQ(f, 0.5f * float(n()) + float(ids_sum()));
    EXPECT_EQ(d, double(ids_sum()) / n());
    EXPECT_EQ(i32, ids_sum());
    EXPECT_EQ(i64, 10 * ids_sum() / n());
    EXPECT_EQ(big, (std::int64_t{1} << 40) * n());
  }
}

TEST_P(Collectives, OpNamesAsStrings) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  auto result = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const double r = ctx.replica_id_in_sync_group();
    return std::make_tuple(ctx.all_reduce("sum", r), ctx.all_reduce("SUM", r), ctx.all_reduce("MEAN", r),
                           ctx.all_reduce("Mean", Tensor::from_vector<double>({r, 2 * r})));
  });
  for (int r = 0; r < n(); ++r) {
    const auto& [sum1, sum2, mean, mean_tensor] = result[r];
    EXPECT_EQ(sum1, ids_sum());
    EXPECT_EQ(sum2, ids_sum());
    EXPECT_EQ(mean, double(ids_sum()) / n());
    EXPECT_EQ(mean_tensor.to_vector<double>(), (std::vector<double>{double(ids_sum()) / n(), 2.0 * ids_sum() / n()}));
  }
}

TEST_P(Collectives, IntegerMeanTruncates) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  // Replica r holds 2^r + 1: sums are rarely multiples of n.
  auto result = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const std::int32_t v = (1 << ctx.replica_id_in_sync_group()) + 1;
    return std::make_tuple(ctx.all_reduce(ReduceOp::kMean, v), ctx.all_reduce(ReduceOp::kMean, std::int64_t{-v}),
                           ctx.all_reduce(ReduceOp::kMean, Tensor::from_vector<std::int32_t>({v, -v, 2 * v})));
  });
  std::int64_t sum = 0;
  for (int r = 0; r < n(); ++r) sum += (1 << r) + 1;
  for (int r = 0; r < n(); ++r) {
    const auto& [pos, neg, t] = result[r];
    EXPECT_EQ(pos, sum / n());
    EXPECT_EQ(neg, -sum / n());  // toward zero
    EXPECT_EQ(t.to_vector<std::int32_t>(),
              (std::vector<std::int32_t>{std::int32_t(sum / n()), std::int32_t(-sum / n()), std::int32_t(2 * sum / n())}));
  }
  if (n() == 3) {
    // 2 + 3 + 5 = 10 over 3 replicas: 3.33 truncates to 3, and -3.33 to -3.
    EXPECT_EQ(std::get<0>(result[0]), 3);
    EXPECT_EQ(std::get<1>(result[0]), -3);
  }
}

// Float sums depend on their order. Replica r's element i is 2^24 when i % n == r, else 1 or 0.5:
// added before the 2^24 the small values survive, after it they round away. Whatever the engine
// does (a staged copy for small tensors, slices for large ones, up to four inputs per pass), every
// element must be the left-to-right sum over replicas 0, 1, ..., n-1, for 2 to 9 replicas.
TEST(AllReduceOrder, FloatSumsAddTheReplicasInOrder) {
  const auto value = [](int n, int r, std::int64_t i) {
    if (i % n == r) return 16777216.0f;
    return (i + r) % 3 == 0 ? 1.0f : 0.5f;
  };
  for (int n = 2; n <= 9; ++n) {
    for (std::int64_t count : {std::int64_t{64}, std::int64_t{20000}}) {
      MirroredStrategy strategy(cpu_devices(n));
      PerReplica<Tensor> result = strategy.run([&] {
        ReplicaContext& ctx = *get_replica_context();
        std::vector<float> mine(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) mine[static_cast<std::size_t>(i)] = value(n, ctx.replica_id_in_sync_group(), i);
        return ctx.all_reduce(ReduceOp::kSum, Tensor::from_vector(std::move(mine)));
      });
      std::vector<float> expected(static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i) {
        float sum = value(n, 0, i);
        for (int r = 1; r < n; ++r) sum += value(n, r, i);
        expected[static_cast<std::size_t>(i)] = sum;
      }
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(result[r].to_vector<float>(), expected) << n << " replicas, " << count << " elements, replica " << r;
      }
    }
  }
}

// A tensor of `dtype` and shape {count} whose element i is the small integer value(i), written in
// place: under ThreadSanitizer every store of a test's own loops costs as much as the library's.
template <class Value>
Tensor leaf_of(DType dtype, std::int64_t count, const Value& value) {
  Tensor leaf = Tensor::zeros(dtype, Shape{count});
  dispatch_dtype(dtype, [&]<class T>(TypeTag<T>) {
    T* out = leaf.data<T>();
    for (std::int64_t i = 0; i < count; ++i) out[i] = testing::from_int<T>(value(i));
  });
  return leaf;
}

// A gradient list larger than a typical shared cache (the CPU backend then writes outputs with
// streaming stores), whose leaves of several dtypes and odd sizes straddle the backend's chunks.
TEST_P(Collectives, AllReduceOfAListLargerThanTheCache) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const std::vector<std::pair<DType, std::int64_t>> leaves{
      {DType::kFloat32, (std::int64_t{4} << 20) + 3}, {DType::kInt32, 1001}, {DType::kFloat16, 4099},
      {DType::kFloat64, (std::int64_t{1} << 20) + 5}, {DType::kBFloat16, 77}};
  const auto value = [](int r, std::size_t leaf, std::int64_t i) { return (i * 5 + r + std::int64_t(leaf)) % 7 - 3; };
  auto result = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    std::vector<Tensor> grads;
    for (std::size_t leaf = 0; leaf < leaves.size(); ++leaf) {
      grads.push_back(leaf_of(leaves[leaf].first, leaves[leaf].second,
                              [&](std::int64_t i) { return value(r, leaf, i); }));
    }
    return get_replica_context()->all_reduce(ReduceOp::kSum, grads);
  });
  for (std::size_t leaf = 0; leaf < leaves.size(); ++leaf) {
    // Small integers, exact in every dtype: the sums compare bitwise, and element by element only
    // to name the first wrong one.
    const Tensor expected = leaf_of(leaves[leaf].first, leaves[leaf].second, [&](std::int64_t i) {
      std::int64_t sum = 0;
      for (int q = 0; q < n(); ++q) sum += value(q, leaf, i);
      return sum;
    });
    for (int r = 0; r < n(); ++r) {
      ASSERT_EQ(result[r].size(), leaves.size());
      const Tensor& got = result[r][leaf];
      ASSERT_EQ(got.dtype(), leaves[leaf].first);
      ASSERT_EQ(got.shape(), expected.shape());
      if (std::memcmp(got.raw_data(), expected.raw_data(), expected.nbytes()) == 0) continue;
      const std::vector<double> values = to_doubles(got);
      const std::vector<double> want = to_doubles(expected);
      std::int64_t wrong = 0;
      std::int64_t first_wrong = -1;
      for (std::size_t i = 0; i < want.size(); ++i) {
        if (values[i] != want[i] && wrong++ == 0) first_wrong = std::int64_t(i);
      }
      EXPECT_EQ(wrong, 0) << "replica " << r << ", leaf " << leaf << ": first wrong element " << first_wrong;
    }
  }
}

// A gradient list of hundreds of small leaves of odd sizes and several dtypes, tens of KiB in
// all: too large for the CPU backend's staging copy, so each chunk it reduces holds many leaves
// (and the padding between them). With scalars in the nest the outputs no longer lie in one
// block, and the backend copies leaf by leaf; both must give every replica every sum.
TEST_P(Collectives, AllReduceOfManySmallLeavesWithAndWithoutScalars) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  const DType dtypes[] = {DType::kFloat32, DType::kInt32, DType::kFloat64, DType::kInt64};
  constexpr std::size_t kLeaves = 300;
  const auto size = [](std::size_t leaf) { return std::int64_t(leaf % 37) + 1; };
  const auto value = [](int r, std::size_t leaf, std::int64_t i) { return (i * 3 + r * 5 + std::int64_t(leaf)) % 11 - 5; };
  auto result = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    std::vector<Tensor> grads;
    std::vector<double> scalars;
    for (std::size_t leaf = 0; leaf < kLeaves; ++leaf) {
      std::vector<std::int64_t> values(static_cast<std::size_t>(size(leaf)));
      for (std::int64_t i = 0; i < size(leaf); ++i) values[std::size_t(i)] = value(r, leaf, i);
      grads.push_back(tensor_of(dtypes[leaf % 4], values, Shape{size(leaf)}));
      if (leaf % 50 == 0) scalars.push_back(double(value(r, leaf, 0)));
    }
    ReplicaContext& ctx = *get_replica_context();
    return std::make_pair(ctx.all_reduce(ReduceOp::kSum, grads),
                          ctx.all_reduce(ReduceOp::kSum, std::make_pair(grads, scalars)));
  });
  const auto check_list = [&](const std::vector<Tensor>& got, int r, const char* which) {
    ASSERT_EQ(got.size(), kLeaves) << which;
    for (std::size_t leaf = 0; leaf < kLeaves; ++leaf) {
      ASSERT_EQ(got[leaf].dtype(), dtypes[leaf % 4]) << which << ", leaf " << leaf;
      std::vector<double> expected(static_cast<std::size_t>(size(leaf)));
      for (std::int64_t i = 0; i < size(leaf); ++i) {
        for (int q = 0; q < n(); ++q) expected[std::size_t(i)] += double(value(q, leaf, i));
      }
      EXPECT_EQ(to_doubles(got[leaf]), expected) << which << ": replica " << r << ", leaf " << leaf;
    }
  };
  for (int r = 0; r < n(); ++r) {
    const auto& [list, with_scalars] = result[r];
    check_list(list, r, "tensors only");
    check_list(with_scalars.first, r, "tensors beside scalars");
    ASSERT_EQ(with_scalars.second.size(), kLeaves / 50);
    for (std::size_t k = 0; k < with_scalars.second.size(); ++k) {
      double expected = 0;
      for (int q = 0; q < n(); ++q) expected += double(value(q, k * 50, 0));
      EXPECT_EQ(with_scalars.second[k], expected) << "replica " << r << ", scalar " << k;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Nests.

TEST_P(Collectives, AllReduceStdContainers) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  auto result = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    std::vector<Tensor> list{Tensor::from_vector<float>({float(r)}), Tensor::from_vector<float>({1, 2}, Shape{1, 2})};
    std::array<double, 3> array{double(r), 1.0, -double(r)};
    std::pair<Tensor, std::int32_t> pair{Tensor::from_vector<std::int64_t>({r, r}), r};
    std::tuple<float, Tensor, std::int64_t> tuple{1.5f, Tensor::scalar<double>(r), std::int64_t{r}};
    std::map<std::string, Tensor> dict{{"b", Tensor::from_vector<std::int32_t>({r})},
                                       {"a", Tensor::from_vector<float>({2.0f * float(r)})}};
    return std::make_tuple(ctx.all_reduce(ReduceOp::kSum, list), ctx.all_reduce(ReduceOp::kSum, array),
                           ctx.all_reduce(ReduceOp::kSum, pair), ctx.all_reduce(ReduceOp::kMean, tuple),
                           ctx.all_reduce(ReduceOp::kSum, dict));
  });
  const int s = ids_sum();
  const float nf = float(n());
  for (int r = 0; r < n(); ++r) {
    const auto& [list, array, pair, tuple, dict] = result[r];
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0].to_vector<float>(), std::vector<float>{float(s)});
    EXPECT_EQ(list[1].shape(), (Shape{1, 2}));
    EXPECT_EQ(list[1].to_vector<float>(), (std::vector<float>{nf, 2 * nf}));
    EXPECT_EQ(array, (std::array<double, 3>{double(s), double(n()), -double(s)}));
    EXPECT_EQ(pair.first.to_vector<std::int64_t>(), (std::vector<std::int64_t>{s, s}));
    EXPECT_EQ(pair.second, s);
    EXPECT_EQ(std::get<0>(tuple), 1.5f);
    EXPECT_EQ(std::get<1>(tuple).shape(), Shape{});
    EXPECT_EQ(std::get<1>(tuple).item<double>(), double(s) / n());
    EXPECT_EQ(std::get<2>(tuple), s / n());
    ASSERT_EQ(dict.size(), 2u);
    EXPECT_EQ(dict.at("a").to_vector<float>(), std::vector<float>{2.0f * float(s)});
    EXPECT_EQ(dict.at("b").to_vector<std::int32_t>(), std::vector<std::int32_t>{s});
  }
}

TEST_P(Collectives, AllReduceNestedAndMixedDtypes) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  using Nested = std::map<std::string, std::vector<std::pair<Tensor, float>>>;
  using Mixed = std::tuple<Tensor, Tensor, Tensor, Tensor, double, std::int32_t>;
  auto result = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    Nested nested{{"layer1", {{Tensor::from_vector<float>({float(r), 1}), 1.0f}, {Tensor::scalar<float>(2), float(r)}}},
                  {"layer2", {{Tensor::from_vector<double>({3, double(r)}, Shape{2, 1}), 0.25f}}}};
    Mixed mixed{tensor_of(DType::kFloat16, {r, 1}, Shape{2}), tensor_of(DType::kBFloat16, {2 * r}, Shape{1}),
                Tensor::from_vector<std::int32_t>({r}), Tensor::from_vector<std::int64_t>({-r}), 0.5, r};
    return std::make_pair(ctx.all_reduce(ReduceOp::kSum, nested), ctx.all_reduce(ReduceOp::kSum, mixed));
  });
  const double s = ids_sum();
  const double nd = n();
  for (int r = 0; r < n(); ++r) {
    const auto& [nested, mixed] = result[r];
    ASSERT_EQ(nested.size(), 2u);
    const auto& layer1 = nested.at("layer1");
    ASSERT_EQ(layer1.size(), 2u);
    EXPECT_EQ(to_doubles(layer1[0].first), (std::vector<double>{s, nd}));
    EXPECT_EQ(layer1[0].second, float(n()));
    EXPECT_EQ(to_doubles(layer1[1].first), std::vector<double>{2 * nd});
    EXPECT_EQ(layer1[1].second, float(s));
    const auto& layer2 = nested.at("layer2");
    ASSERT_EQ(layer2.size(), 1u);
    EXPECT_EQ(layer2[0].first.shape(), (Shape{2, 1}));
    EXPECT_EQ(to_doubles(layer2[0].first), (std::vector<double>{3 * nd, s}));
    EXPECT_EQ(layer2[0].second, 0.25f * float(n()));
    EXPECT_EQ(std::get<0>(mixed).dtype(), DType::kFloat16);
    EXPECT_EQ(to_doubles(std::get<0>(mixed)), (std::vector<double>{s, nd}));
    EXPECT_EQ(std::get<1>(mixed).dtype(), DType::kBFloat16);
    EXPECT_EQ(to_doubles(std::get<1>(mixed)), std::vector<double>{2 * s});
    EXPECT_EQ(to_doubles(std::get<2>(mixed)), std::vector<double>{s});
    EXPECT_EQ(to_doubles(std::get<3>(mixed)), std::vector<double>{-s});
    EXPECT_EQ(std::get<4>(mixed), 0.5 * nd);
    EXPECT_EQ(std::get<5>(mixed), ids_sum());
  }
}

TEST_P(Collectives, AllReduceUserAggregate) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  auto result = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    Grads g{Tensor::from_vector<float>({float(r), 1, 2, 3}, Shape{2, 2}), Tensor::from_vector<float>({1}), 2.0 * r};
    return std::make_pair(ctx.all_reduce(ReduceOp::kSum, g), ctx.all_reduce("mean", std::vector<Grads>{g, g}));
  });
  const float s = float(ids_sum());
  const float nf = float(n());
  for (int r = 0; r < n(); ++r) {
    const auto& [sum, means] = result[r];
    EXPECT_EQ(sum.w.shape(), (Shape{2, 2}));
    EXPECT_EQ(sum.w.to_vector<float>(), (std::vector<float>{s, nf, 2 * nf, 3 * nf}));
    EXPECT_EQ(sum.b.to_vector<float>(), std::vector<float>{nf});
    EXPECT_EQ(sum.scale, 2.0 * ids_sum());
    ASSERT_EQ(means.size(), 2u);
    for (const Grads& m : means) {
      EXPECT_EQ(m.w.to_vector<float>(), (std::vector<float>{s / nf, 1, 2, 3}));
      EXPECT_EQ(m.b.to_vector<float>(), std::vector<float>{1});
      EXPECT_EQ(m.scale, 2.0 * ids_sum() / n());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// all_gather.

// Replica r's value has the base shape (2, 3, 4) with `r % 3 + 1` entries along `axis` (for
// rank-3 values), so per-replica sizes differ; elements are (r * 37 + i) % 200 - 100.
Shape gather_shape(int r, int axis) {
  std::vector<std::int64_t> dims{2, 3, 4};
  dims[static_cast<std::size_t>(axis < 0 ? axis + 3 : axis)] = r % 3 + 1;
  return Shape(dims);
}

std::vector<std::int64_t> gather_values(int r, const Shape& shape) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < shape.num_elements(); ++i) v.push_back((r * 37 + i) % 200 - 100);
  return v;
}

TEST_P(Collectives, AllGatherAlongEveryAxisWithUnevenSizes) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16}) {
    for (int axis : {0, 1, 2, -1, -2, -3}) {
      SCOPED_TRACE(::testing::Message() << dtype << " axis " << axis);
      PerReplica<Tensor> result = strategy.run([&] {
        const int r = get_replica_context()->replica_id_in_sync_group();
        const Shape shape = gather_shape(r, axis);
        return get_replica_context()->all_gather(tensor_of(dtype, gather_values(r, shape), shape), axis);
      });
      std::vector<std::vector<std::int64_t>> parts;
      std::vector<Shape> shapes;
      std::int64_t total = 0;
      for (int r = 0; r < n(); ++r) {
        shapes.push_back(gather_shape(r, axis));
        parts.push_back(gather_values(r, shapes.back()));
        total += shapes.back()[axis];
      }
      const int a = axis < 0 ? axis + 3 : axis;
      const std::vector<double> expected = as_doubles(concat_reference(parts, shapes, a));
      for (int r = 0; r < n(); ++r) {
        EXPECT_EQ(result[r].dtype(), dtype);
        EXPECT_EQ(result[r].shape(), shapes[0].with_dim(a, total));
        EXPECT_EQ(result[r].device(), Device::cpu(r));
        EXPECT_EQ(to_doubles(result[r]), expected) << "replica " << r;
      }
    }
  }
}

TEST_P(Collectives, AllGatherWithEmptyContributions) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  // Only the last replica contributes rows.
  PerReplica<Tensor> result = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    const std::int64_t rows = r == n() - 1 ? 2 : 0;
    std::vector<std::int32_t> values;
    for (std::int64_t i = 0; i < rows * 3; ++i) values.push_back(static_cast<std::int32_t>(i));
    return get_replica_context()->all_gather(Tensor::from_vector<std::int32_t>(values, Shape{rows, 3}), 0);
  });
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(result[r].shape(), (Shape{2, 3}));
    EXPECT_EQ(result[r].to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  }
}

// A negative axis counts from the end of each leaf, whatever its rank.
TEST_P(Collectives, AllGatherNests) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  auto result = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    const std::int64_t rows = r + 1;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(rows), r);
    std::vector<std::int64_t> twice_ids(static_cast<std::size_t>(2 * rows), r);
    std::tuple<std::vector<Tensor>, std::pair<Tensor, Tensor>> value{
        {Tensor::from_vector<float>({float(r)}), tensor_of(DType::kInt64, ids, Shape{1, rows})},
        {tensor_of(DType::kFloat16, twice_ids, Shape{2, rows}), Tensor::from_vector<std::int32_t>({10 * r})}};
    return get_replica_context()->all_gather(value, -1);
  });
  std::vector<double> ids;
  std::vector<double> repeated;
  std::vector<double> tens;
  for (int r = 0; r < n(); ++r) {
    ids.push_back(r);
    tens.push_back(10 * r);
    for (int i = 0; i <= r; ++i) repeated.push_back(r);
  }
  std::vector<double> two_rows = repeated;
  two_rows.insert(two_rows.end(), repeated.begin(), repeated.end());
  const std::int64_t rows = n() * (n() + 1) / 2;
  for (int r = 0; r < n(); ++r) {
    const auto& [list, pair] = result[r];
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0].shape(), Shape{n()});
    EXPECT_EQ(to_doubles(list[0]), ids);
    EXPECT_EQ(list[1].shape(), (Shape{1, rows}));
    EXPECT_EQ(to_doubles(list[1]), repeated);
    EXPECT_EQ(pair.first.shape(), (Shape{2, rows}));
    EXPECT_EQ(to_doubles(pair.first), two_rows);
    EXPECT_EQ(to_doubles(pair.second), tens);
  }
}

TEST_P(Collectives, AllGatherMapAndUserAggregate) {
  MirroredStrategy strategy(cpu_devices(n()), options());
  auto result = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    const std::int64_t rows = r + 1;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(rows), r);
    std::map<std::string, Tensor> dict{{"x", tensor_of(DType::kFloat16, ids, Shape{rows})},
                                       {"y", Tensor::from_vector<double>({double(r), 0.5}, Shape{1, 2})}};
    Layer layer{tensor_of(DType::kBFloat16, ids, Shape{rows, 1}),
                Tensor::from_vector<std::int32_t>({r, -r}, Shape{2, 1})};
    ReplicaContext& ctx = *get_replica_context();
    return std::make_pair(ctx.all_gather(dict, 0), ctx.all_gather(layer, 0));
  });
  std::vector<double> repeated;
  std::vector<double> y;
  std::vector<double> b;
  for (int r = 0; r < n(); ++r) {
    for (int i = 0; i <= r; ++i) repeated.push_back(r);
    y.insert(y.end(), {double(r), 0.5});
    b.insert(b.end(), {double(r), -double(r)});
  }
  const std::int64_t rows = n() * (n() + 1) / 2;
  for (int r = 0; r < n(); ++r) {
    const auto& [dict, layer] = result[r];
    EXPECT_EQ(dict.at("x").shape(), Shape{rows});
    EXPECT_EQ(to_doubles(dict.at("x")), repeated);
    EXPECT_EQ(dict.at("y").shape(), (Shape{n(), 2}));
    EXPECT_EQ(to_doubles(dict.at("y")), y);
    EXPECT_EQ(layer.kernel.shape(), (Shape{rows, 1}));
    EXPECT_EQ(to_doubles(layer.kernel), repeated);
    EXPECT_EQ(layer.bias.shape(), (Shape{2 * n(), 1}));
    EXPECT_EQ(to_doubles(layer.bias), b);
  }
}

}  // namespace
}  // namespace distribute
