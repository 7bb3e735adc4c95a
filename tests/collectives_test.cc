// ReplicaContext::all_reduce and all_gather on CPU replicas: SUM and MEAN for every dtype on tensors
// of many shapes (empty and large ones included), on scalars and on nests (std containers, nested
// and mixed-dtype ones, a user aggregate registered with StructFields); string op names; integer
// MEAN truncation; all_gather along every axis with uneven per-replica sizes. Ends with a property
// test comparing all_reduce, all_gather, Strategy::reduce and Strategy::gather on random inputs with
// a plain reference implementation written here.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
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

using testing::as_double;
using testing::cpu_devices;
using testing::tensor_of;
using testing::to_doubles;

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

double mean_of(DType dtype, std::int64_t sum, std::int64_t count) {
  return dispatch_dtype(dtype, [&]<class T>(TypeTag<T>) { return mean_in<T>(sum, count); });
}

std::vector<std::int64_t> concat_reference(const std::vector<std::vector<std::int64_t>>& parts,
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

std::vector<double> as_doubles(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

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
std::string backend_label(CrossDeviceOps ops) {
  return ops == CrossDeviceOps::kAuto ? "SharedMemory" : "ReductionToOneDevice";
}

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
      std::vector<std::int64_t> values(static_cast<std::size_t>(leaves[leaf].second));
      for (std::int64_t i = 0; i < leaves[leaf].second; ++i) values[std::size_t(i)] = value(r, leaf, i);
      grads.push_back(tensor_of(leaves[leaf].first, values, Shape{leaves[leaf].second}));
    }
    return get_replica_context()->all_reduce(ReduceOp::kSum, grads);
  });
  for (int r = 0; r < n(); ++r) {
    ASSERT_EQ(result[r].size(), leaves.size());
    for (std::size_t leaf = 0; leaf < leaves.size(); ++leaf) {
      const Tensor& got = result[r][leaf];
      ASSERT_EQ(got.dtype(), leaves[leaf].first);
      const std::vector<double> values = to_doubles(got);
      ASSERT_EQ(values.size(), std::size_t(leaves[leaf].second));
      std::int64_t wrong = 0;
      std::int64_t first_wrong = -1;
      for (std::int64_t i = 0; i < leaves[leaf].second; ++i) {
        std::int64_t sum = 0;
        for (int q = 0; q < n(); ++q) sum += value(q, leaf, i);
        if (values[std::size_t(i)] != double(sum) && wrong++ == 0) first_wrong = i;
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

// ---------------------------------------------------------------------------------------------
// Property test: random inputs against a reference implementation.

// Random per-replica inputs for one trial, as small integers (exact in every dtype).
struct Trial {
  int n = 1;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int axis = 0;  // as passed, possibly negative
  std::vector<Shape> shapes;
  std::vector<std::vector<std::int64_t>> values;

  std::string describe() const {
    std::ostringstream os;
    os << n << " replicas, " << dtype << ", " << op << ", axis " << axis << ", shapes";
    for (const Shape& s : shapes) os << ' ' << s;
    return os.str();
  }
  std::vector<Tensor> tensors() const {
    std::vector<Tensor> out;
    for (int r = 0; r < n; ++r) out.push_back(tensor_of(dtype, values[static_cast<std::size_t>(r)], shapes[static_cast<std::size_t>(r)]));
    return out;
  }
};

class TrialMaker {
 public:
  explicit TrialMaker(std::uint32_t seed) : rng_(seed) {}

  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  // `uneven_axis`: the size along the axis differs per replica (min_axis_size.. 4), as gathers
  // and reductions with an axis allow; otherwise every replica has the same shape.
  Trial make(int max_replicas, bool uneven_axis, int min_axis_size) {
    static constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                        DType::kInt64,   DType::kFloat16, DType::kBFloat16};
    Trial t;
    t.n = uniform(1, max_replicas);
    t.dtype = kDTypes[uniform(0, 5)];
    t.op = uniform(0, 1) == 0 ? ReduceOp::kSum : ReduceOp::kMean;
    const int rank = uniform(1, 3);
    t.axis = uniform(-rank, rank - 1);
    const int a = t.axis < 0 ? t.axis + rank : t.axis;
    std::vector<std::int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(uniform(0, 4));
    if (!uneven_axis) dims[static_cast<std::size_t>(a)] = std::max<std::int64_t>(dims[static_cast<std::size_t>(a)], min_axis_size);
    for (int r = 0; r < t.n; ++r) {
      if (uneven_axis) dims[static_cast<std::size_t>(a)] = uniform(min_axis_size, 4);
      t.shapes.emplace_back(dims);
      std::vector<std::int64_t> v;
      for (std::int64_t i = 0; i < t.shapes.back().num_elements(); ++i) v.push_back(uniform(-3, 3));
      t.values.push_back(std::move(v));
    }
    return t;
  }

 private:
  std::mt19937 rng_;
};

// Element-wise SUM or MEAN across replicas (equal shapes).
std::vector<double> reduce_reference(const Trial& t) {
  std::vector<double> out;
  for (std::size_t i = 0; i < t.values[0].size(); ++i) {
    std::int64_t sum = 0;
    for (const auto& v : t.values) sum += v[i];
    out.push_back(t.op == ReduceOp::kSum ? static_cast<double>(sum) : mean_of(t.dtype, sum, t.n));
  }
  return out;
}

// SUM or MEAN across replicas and along t.axis; MEAN divides by the number of elements reduced.
std::pair<Shape, std::vector<double>> reduce_axis_reference(const Trial& t) {
  const int a = normalize_axis(t.axis, t.shapes[0].rank(), "reference");
  const Shape reduced = t.shapes[0].without_dim(a);
  std::vector<std::int64_t> sums(static_cast<std::size_t>(reduced.num_elements()), 0);
  std::int64_t count = 0;
  for (int r = 0; r < t.n; ++r) {
    const Shape& s = t.shapes[static_cast<std::size_t>(r)];
    const std::int64_t inner = s.inner_size(a);
    for (std::int64_t o = 0; o < s.outer_size(a); ++o) {
      for (std::int64_t d = 0; d < s[a]; ++d) {
        for (std::int64_t i = 0; i < inner; ++i) {
          sums[static_cast<std::size_t>(o * inner + i)] += t.values[static_cast<std::size_t>(r)][static_cast<std::size_t>((o * s[a] + d) * inner + i)];
        }
      }
    }
    count += s[a];
  }
  std::vector<double> out;
  for (std::int64_t sum : sums) {
    out.push_back(t.op == ReduceOp::kSum ? static_cast<double>(sum) : mean_of(t.dtype, sum, count));
  }
  return {reduced, out};
}

std::pair<Shape, std::vector<double>> gather_reference(const Trial& t) {
  const int a = normalize_axis(t.axis, t.shapes[0].rank(), "reference");
  std::int64_t total = 0;
  for (const Shape& s : t.shapes) total += s[a];
  return {t.shapes[0].with_dim(a, total), as_doubles(concat_reference(t.values, t.shapes, a))};
}

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kTrialsPerKind = 150;
#else
constexpr int kTrialsPerKind = 1000;
#endif

class PropertyTest : public ::testing::TestWithParam<CrossDeviceOps> {
 protected:
  PropertyTest() {
    MirroredStrategyOptions options;
    options.cross_device_ops = GetParam();
    for (int n = 1; n <= 4; ++n) {
      strategies_[static_cast<std::size_t>(n)] = std::make_unique<MirroredStrategy>(cpu_devices(n), options);
    }
  }
  MirroredStrategy& strategy(int n) { return *strategies_[static_cast<std::size_t>(n)]; }

  void check(const Trial& t, const Tensor& got, const Shape& shape, const std::vector<double>& expected,
             const std::string& what) {
    if (failures_ >= 5) return;
    if (got.dtype() != t.dtype || got.shape() != shape || to_doubles(got) != expected) {
      ++failures_;
      ADD_FAILURE() << what << " differs from the reference for " << t.describe() << ": got " << got
                    << ", expected shape " << shape << " values " << ::testing::PrintToString(expected);
    }
  }

  TrialMaker maker_{20240607};
  std::array<std::unique_ptr<MirroredStrategy>, 5> strategies_;
  int failures_ = 0;
};

TEST_P(PropertyTest, AllReduceMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    const Trial t = maker_.make(4, false, 0);
    PerReplica<Tensor> inputs(t.tensors());
    PerReplica<Tensor> result = strategy(t.n).run(
        [&](const Tensor& mine) { return get_replica_context()->all_reduce(t.op, mine); }, inputs);
    const std::vector<double> expected = reduce_reference(t);
    for (int r = 0; r < t.n; ++r) check(t, result[r], t.shapes[0], expected, "all_reduce of replica " + std::to_string(r));
  }
}

// A list of up to three tensors of different dtypes and shapes, reduced in one call.
TEST_P(PropertyTest, AllReduceOfMixedListsMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind / 2; ++trial) {
    const int n = maker_.uniform(1, 4);
    const ReduceOp op = maker_.uniform(0, 1) == 0 ? ReduceOp::kSum : ReduceOp::kMean;
    std::vector<Trial> leaves;
    for (int leaf = maker_.uniform(1, 3); leaf > 0; --leaf) {
      Trial t;
      do {
        t = maker_.make(4, false, 0);
      } while (t.n < n);
      t.n = n;
      t.op = op;
      t.shapes.resize(static_cast<std::size_t>(n));
      t.values.resize(static_cast<std::size_t>(n));
      leaves.push_back(std::move(t));
    }
    std::vector<std::vector<Tensor>> per_replica(static_cast<std::size_t>(n));
    for (const Trial& t : leaves) {
      std::vector<Tensor> tensors = t.tensors();
      for (int r = 0; r < n; ++r) per_replica[static_cast<std::size_t>(r)].push_back(tensors[static_cast<std::size_t>(r)]);
    }
    PerReplica<std::vector<Tensor>> inputs(per_replica);
    auto result = strategy(n).run(
        [&](const std::vector<Tensor>& mine) { return get_replica_context()->all_reduce(op, mine); }, inputs);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(result[r].size(), leaves.size());
      for (std::size_t leaf = 0; leaf < leaves.size(); ++leaf) {
        check(leaves[leaf], result[r][leaf], leaves[leaf].shapes[0], reduce_reference(leaves[leaf]),
              "leaf " + std::to_string(leaf) + " of a list all_reduce");
      }
    }
  }
}

TEST_P(PropertyTest, AllGatherMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    const Trial t = maker_.make(4, true, 0);
    PerReplica<Tensor> inputs(t.tensors());
    PerReplica<Tensor> result = strategy(t.n).run(
        [&](const Tensor& mine) { return get_replica_context()->all_gather(mine, t.axis); }, inputs);
    const auto [shape, expected] = gather_reference(t);
    for (int r = 0; r < t.n; ++r) check(t, result[r], shape, expected, "all_gather of replica " + std::to_string(r));
  }
}

TEST_P(PropertyTest, StrategyReduceMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    const Trial t = maker_.make(4, false, 0);
    PerReplica<Tensor> inputs(t.tensors());
    check(t, strategy(t.n).reduce(t.op, inputs, std::nullopt), t.shapes[0], reduce_reference(t), "Strategy::reduce");
  }
}

TEST_P(PropertyTest, StrategyReduceAlongAnAxisMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    // At least one element along the axis on each replica, so that MEAN has a count.
    const Trial t = maker_.make(4, true, 1);
    PerReplica<Tensor> inputs(t.tensors());
    const auto [shape, expected] = reduce_axis_reference(t);
    check(t, strategy(t.n).reduce(t.op, inputs, t.axis), shape, expected, "Strategy::reduce with an axis");
  }
}

TEST_P(PropertyTest, StrategyGatherMatchesReference) {
  for (int trial = 0; trial < kTrialsPerKind; ++trial) {
    const Trial t = maker_.make(4, true, 0);
    PerReplica<Tensor> inputs(t.tensors());
    const auto [shape, expected] = gather_reference(t);
    check(t, strategy(t.n).gather(inputs, t.axis), shape, expected, "Strategy::gather");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PropertyTest,
                         ::testing::Values(CrossDeviceOps::kAuto, CrossDeviceOps::kReductionToOneDevice),
                         [](const auto& p) { return backend_label(p.param); });

}  // namespace
}  // namespace distribute
