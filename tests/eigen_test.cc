// Eigen in and out of tensors: typed from_blob, zero-copy views of Eigen matrices and arrays in
// both storage orders and back, read-only data from const tensors, and all_reduce in place, of
// tensor nests and of Eigen gradients given one by one, over both CPU backends and 1-4 replicas.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;

// A const tensor hands out read-only data; a handle of its own (copies share storage) writes.
static_assert(std::is_same_v<decltype(std::declval<const Tensor&>().data<float>()), const float*>);
static_assert(std::is_same_v<decltype(std::declval<Tensor&>().data<float>()), float*>);
static_assert(std::is_same_v<decltype(std::declval<const Tensor&>().raw_data()), const void*>);
static_assert(std::is_same_v<decltype(std::declval<const Tensor&>().flat<float>()),
                             Eigen::Map<const Eigen::Array<float, Eigen::Dynamic, 1>>>);
static_assert(!std::is_assignable_v<decltype(std::declval<const Tensor&>().matrix<float>()(0, 0)), float>);
static_assert(std::is_assignable_v<decltype(std::declval<Tensor&>().matrix<float>()(0, 0)), float>);
// Const Eigen objects cannot be viewed: the view would write into them.
static_assert(EigenDense<Eigen::MatrixXf>);
static_assert(!EigenDense<const Eigen::MatrixXf>);
static_assert(!EigenDense<Eigen::Map<const Eigen::MatrixXf>>);

TEST(EigenInterop, TypedFromBlobTakesTheDtypeFromThePointer) {
  std::vector<std::int64_t> memory{1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::from_blob(memory.data(), Shape{2, 3});
  EXPECT_EQ(t.dtype(), DType::kInt64);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.data<std::int64_t>(), memory.data());
  t.flat<std::int64_t>() += 10;
  EXPECT_EQ(memory, (std::vector<std::int64_t>{11, 12, 13, 14, 15, 16}));
  expect_error<InvalidArgumentError>([] { (void)Tensor::from_blob(static_cast<float*>(nullptr), Shape{2}); },
                                     {"from_blob", "null data", "(2,)"});
}

TEST(EigenInterop, ViewOfARowMajorMatrixHasItsShape) {
  Eigen::Matrix<float, 2, 3, Eigen::RowMajor> m;
  m << 1, 2, 3, 4, 5, 6;
  Tensor t = Tensor::view(m);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(t.data<float>(), m.data());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  t.matrix<float>()(1, 0) = 40;
  EXPECT_EQ(m(1, 0), 40);
}

TEST(EigenInterop, ViewOfAColumnMajorMatrixIsItsTransposeAndRoundTrips) {
  Eigen::MatrixXd m(2, 3);  // column-major, Eigen's default
  m << 1, 2, 3, 4, 5, 6;
  Tensor t = Tensor::view(m);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.dtype(), DType::kFloat64);
  // Row-major order of the transpose is the matrix's column-major memory.
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  auto back = t.matrix<double, Eigen::ColMajor>();
  EXPECT_EQ(back.rows(), 2);
  EXPECT_EQ(back.cols(), 3);
  EXPECT_EQ(back, m);
  back(0, 2) = -3;
  EXPECT_EQ(m(0, 2), -3);
  const Tensor& read_only = t;
  EXPECT_EQ((read_only.array<double, Eigen::ColMajor>()(1, 1)), 5);
}

TEST(EigenInterop, VectorsAndArraysAreRankOneOrTwo) {
  Eigen::VectorXf column = Eigen::VectorXf::LinSpaced(4, 0, 3);
  EXPECT_EQ(Tensor::view(column).shape(), Shape{4});
  Eigen::RowVector3i row(7, 8, 9);
  EXPECT_EQ(Tensor::view(row).to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, 8, 9}));
  Eigen::Array<double, 2, 2, Eigen::RowMajor> array;
  array << 1, 2, 3, 4;
  Tensor t = Tensor::view(array);
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  t.array<double>() *= 2;
  EXPECT_EQ(array(1, 1), 8);
  std::vector<float> memory(6, 1.0f);
  Eigen::Map<Eigen::MatrixXf> map(memory.data(), 2, 3);
  EXPECT_EQ(Tensor::view(map).data<float>(), memory.data());
}

TEST(EigenInterop, AStridedMapIsNotContiguous) {
  Eigen::MatrixXf big = Eigen::MatrixXf::Zero(4, 4);
  Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>> corner(big.data(), 2, 2, Eigen::OuterStride<>(4));
  expect_error<InvalidArgumentError>([&] { (void)Tensor::view(corner); },
                                     {"Tensor::view", "not contiguous", "copy it into a Matrix or Array first"});
}

TEST(EigenInterop, MatrixAndArrayNeedRankTwo) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3});
  expect_error<InvalidArgumentError>([&] { (void)t.array<float>(); }, {"Tensor::array", "rank 1", "needs rank 2"});
  expect_error<InvalidArgumentError>([&] { (void)t.matrix<float, Eigen::ColMajor>(); },
                                     {"Tensor::matrix", "rank 1", "needs rank 2"});
}

// Every replica's gradients start as replica r's values r + k and must end as the reduction.
class InPlace : public ::testing::TestWithParam<std::tuple<int, CrossDeviceOps>> {
 protected:
  MirroredStrategy make_strategy() const {
    MirroredStrategyOptions options;
    options.cross_device_ops = std::get<1>(GetParam());
    return MirroredStrategy(cpu_devices(replicas()), options);
  }
  int replicas() const { return std::get<0>(GetParam()); }
  // Sum over replicas r of (r + k).
  float sum_of(int k) const { return static_cast<float>(replicas() * k + replicas() * (replicas() - 1) / 2); }
};

TEST_P(InPlace, ANestOfTensorsHoldsTheResult) {
  MirroredStrategy strategy = make_strategy();
  auto results = strategy.run([&] {
    const float r = static_cast<float>(get_replica_context()->replica_id_in_sync_group());
    std::vector<Tensor> grads{Tensor::from_vector<float>({r, r + 1, r + 2}), Tensor::scalar<double>(r + 3),
                              Tensor::zeros(DType::kInt32, Shape{0})};
    const void* before = grads[0].raw_data();
    get_replica_context()->all_reduce_in_place(ReduceOp::kSum, grads);
    EXPECT_EQ(grads[0].raw_data(), before) << "in place: no new tensor";
    return grads;
  });
  for (const std::vector<Tensor>& grads : results.values()) {
    EXPECT_EQ(grads[0].to_vector<float>(), (std::vector<float>{sum_of(0), sum_of(1), sum_of(2)}));
    EXPECT_EQ(grads[1].item<double>(), sum_of(3));
    EXPECT_EQ(grads[2].num_elements(), 0);
  }
}

TEST_P(InPlace, EigenGradientsInOneLine) {
  MirroredStrategy strategy = make_strategy();
  const int n = replicas();
  std::vector<Eigen::MatrixXf> weights(static_cast<std::size_t>(n));
  std::vector<Eigen::VectorXd> biases(static_cast<std::size_t>(n));
  strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Eigen::MatrixXf& w = weights[static_cast<std::size_t>(r)];
    Eigen::VectorXd& b = biases[static_cast<std::size_t>(r)];
    w = Eigen::MatrixXf::Constant(3, 2, static_cast<float>(r));
    w(2, 1) = static_cast<float>(r + 1);
    b = Eigen::VectorXd::Constant(5, 2.0 * r);
    get_replica_context()->all_reduce_in_place(ReduceOp::kMean, w, b);
  });
  const float mean_r = static_cast<float>(n - 1) / 2.0f;
  for (int r = 0; r < n; ++r) {
    Eigen::MatrixXf expected = Eigen::MatrixXf::Constant(3, 2, mean_r);
    expected(2, 1) = mean_r + 1;
    EXPECT_EQ(weights[static_cast<std::size_t>(r)], expected) << "replica " << r;
    EXPECT_EQ(biases[static_cast<std::size_t>(r)], Eigen::VectorXd::Constant(5, n - 1.0)) << "replica " << r;
  }
}

TEST_P(InPlace, LargeGradientsGoThroughTheSlicedPath) {
  MirroredStrategy strategy = make_strategy();
  constexpr Eigen::Index kRows = 512, kCols = 300;  // 600 KiB per replica: many chunks
  std::vector<Eigen::MatrixXf> grads(static_cast<std::size_t>(replicas()));
  strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Eigen::MatrixXf& g = grads[static_cast<std::size_t>(r)];
    g.resize(kRows, kCols);
    for (Eigen::Index i = 0; i < kRows; ++i) {
      for (Eigen::Index j = 0; j < kCols; ++j) g(i, j) = static_cast<float>(r + (i * kCols + j) % 97);
    }
    get_replica_context()->all_reduce_in_place(ReduceOp::kSum, g);
  });
  for (const Eigen::MatrixXf& g : grads) {
    for (Eigen::Index i = 0; i < kRows; i += 37) {
      for (Eigen::Index j = 0; j < kCols; j += 11) {
        ASSERT_EQ(g(i, j), sum_of(static_cast<int>((i * kCols + j) % 97))) << "at (" << i << ", " << j << ")";
      }
    }
  }
}

TEST_P(InPlace, ScalarLeavesHaveNoMemoryToReduceInto) {
  MirroredStrategy strategy = make_strategy();
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] {
          std::pair<Tensor, float> value{Tensor::scalar(1.0f), 2.0f};
          get_replica_context()->all_reduce_in_place(ReduceOp::kSum, value);
        });
      },
      {"all_reduce_in_place: leaf 1 is a scalar", "pass Tensors"});
}

INSTANTIATE_TEST_SUITE_P(Backends, InPlace,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(CrossDeviceOps::kAuto,
                                                              CrossDeviceOps::kReductionToOneDevice)),
                         [](const auto& param_info) {
                           return std::to_string(std::get<0>(param_info.param)) + "replicas_" +
                                  (std::get<1>(param_info.param) == CrossDeviceOps::kAuto ? "SharedMemory"
                                                                                          : "OneDevice");
                         });

TEST(EigenInterop, InPlaceInTheDefaultContextLeavesTheValue) {
  Eigen::Vector2f g(1.5f, -2.0f);
  Eigen::Matrix2d h = Eigen::Matrix2d::Identity();
  get_replica_context()->all_reduce_in_place(ReduceOp::kSum, g, h);
  EXPECT_EQ(g, Eigen::Vector2f(1.5f, -2.0f));
  EXPECT_EQ(h, Eigen::Matrix2d::Identity());
}

}  // namespace
}  // namespace distribute
