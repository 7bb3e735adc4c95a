// distribute::torch's tensors: from_torch and to_torch share LibTorch's memory both ways (data
// pointers), for every dtype, keep it alive from either side, place it on the calling replica's
// device, and refuse what they cannot share with a typed error that says what to change. DLPack
// between the two libraries goes through LibTorch's own at::toDLPack / at::fromDLPack.
#include <gtest/gtest.h>

#include <ATen/DLConvertor.h>
#include <torch/torch.h>

#include <vector>

#include "distribute/device/dlpack.h"
#include "distribute/distribute.h"
#include "distribute/torch/torch.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::expect_error;

struct DTypeCase {
  DType dtype;
  at::ScalarType scalar_type;
};

class TorchDTypes : public ::testing::TestWithParam<DTypeCase> {};

TEST_P(TorchDTypes, FromTorchSharesLibTorchsStorage) {
  at::Tensor source = torch::arange(6, torch::TensorOptions().dtype(GetParam().scalar_type)).reshape({2, 3});
  const Tensor t = from_torch(source);
  EXPECT_EQ(t.raw_data(), source.data_ptr());
  EXPECT_EQ(t.dtype(), GetParam().dtype);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.device(), Device::cpu());
  // Writes through LibTorch are read here.
  source.fill_(5);
  const Tensor as_double = from_torch(source.to(torch::kFloat64));
  EXPECT_EQ(as_double.to_vector<double>(), std::vector<double>(6, 5.0));
  EXPECT_EQ(from_torch(to_torch(t).to(torch::kFloat64)).to_vector<double>(), std::vector<double>(6, 5.0));
}

TEST_P(TorchDTypes, ToTorchSharesTheTensorsMemory) {
  Tensor t = Tensor::zeros(GetParam().dtype, Shape{3, 1, 2});
  const at::Tensor out = to_torch(t);
  EXPECT_EQ(out.data_ptr(), t.raw_data());
  EXPECT_EQ(out.scalar_type(), GetParam().scalar_type);
  EXPECT_EQ(out.sizes().vec(), (std::vector<std::int64_t>{3, 1, 2}));
  EXPECT_TRUE(out.is_contiguous());
  out.fill_(2);  // LibTorch writes, the Tensor reads
  EXPECT_EQ(from_torch(out.to(torch::kFloat64)).to_vector<double>(), std::vector<double>(6, 2.0));
}

INSTANTIATE_TEST_SUITE_P(EveryDType, TorchDTypes,
                         ::testing::Values(DTypeCase{DType::kFloat32, torch::kFloat32},
                                           DTypeCase{DType::kFloat64, torch::kFloat64},
                                           DTypeCase{DType::kFloat16, torch::kFloat16},
                                           DTypeCase{DType::kBFloat16, torch::kBFloat16},
                                           DTypeCase{DType::kInt32, torch::kInt32},
                                           DTypeCase{DType::kInt64, torch::kInt64}),
                         [](const ::testing::TestParamInfo<DTypeCase>& test) {
                           return std::string(dtype_name(test.param.dtype));
                         });

TEST(Torch, EitherSideKeepsTheMemoryAlive) {
  Tensor t;
  void* data = nullptr;
  {
    at::Tensor source = torch::full({4}, 3.0f);
    data = source.data_ptr();
    t = from_torch(source);
    EXPECT_EQ(source.use_count(), 2) << "from_torch holds a reference of its own";
  }
  // The LibTorch handle is gone; the storage is not.
  EXPECT_EQ(t.raw_data(), data);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(4, 3.0f));

  at::Tensor out;
  {
    Tensor mine = Tensor::from_vector<float>({1, 2, 3});
    out = to_torch(mine);
  }
  EXPECT_EQ(out.sum().item<float>(), 6.0f);
}

TEST(Torch, ViewsWithAnOffsetScalarsAndEmptyTensors) {
  at::Tensor rows = torch::arange(12, torch::kFloat32).reshape({4, 3});
  at::Tensor middle = rows.narrow(0, 1, 2);  // contiguous, at an offset into the storage
  const Tensor t = from_torch(middle);
  EXPECT_EQ(t.raw_data(), middle.data_ptr());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{3, 4, 5, 6, 7, 8}));

  const Tensor scalar = from_torch(torch::scalar_tensor(7, torch::kInt64));
  EXPECT_EQ(scalar.shape(), Shape{});
  EXPECT_EQ(to_torch(Tensor::scalar<double>(2.5)).dim(), 0);
  EXPECT_EQ(from_torch(torch::empty({0, 5})).num_elements(), 0);
}

TEST(Torch, ReplicasAllReduceLibTorchGradientsInPlace) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  std::vector<at::Tensor> grads{torch::full({3}, 1.0f), torch::full({3}, 2.0f)};
  strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    const int r = ctx->replica_id_in_sync_group();
    Tensor g = from_torch(grads[static_cast<std::size_t>(r)]);
    EXPECT_EQ(g.device(), Device::cpu(r));
    ctx->all_reduce_in_place(ReduceOp::kSum, g);
  });
  for (const at::Tensor& g : grads) EXPECT_TRUE(torch::equal(g, torch::full({3}, 3.0f))) << g;
}

// docs/torch.md's program: LibTorch's autograd on each replica's half of the batch, the gradients
// summed in place, the same update on both.
TEST(Torch, TheGuidesProgramGivesEveryReplicaTheSameUpdate) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  std::vector<at::Tensor> weights{torch::ones({3}), torch::ones({3})};
  strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    const int r = ctx->replica_id_in_sync_group();
    at::Tensor w = weights[static_cast<std::size_t>(r)].clone().requires_grad_(true);
    at::Tensor x = torch::full({4, 3}, r + 1.0);
    at::Tensor loss = (x.matmul(w) - 1).pow(2).mean() / ctx->num_replicas_in_sync();
    loss.backward();
    Tensor grad = from_torch(w.grad());
    ctx->all_reduce_in_place(ReduceOp::kSum, grad);
    torch::NoGradGuard no_grad;
    weights[static_cast<std::size_t>(r)] -= 0.01 * w.grad();
  });
  // Gradients 2 and 10 per element; 1 - 0.01 * 12.
  for (const at::Tensor& w : weights) EXPECT_TRUE(torch::allclose(w, torch::full({3}, 0.88f))) << w;
  EXPECT_TRUE(torch::equal(weights[0], weights[1]));
}

TEST(Torch, DLPackCarriesTensorsBetweenTheTwoLibraries) {
  at::Tensor source = torch::arange(4, torch::kFloat64);
  const Tensor t = from_dlpack(at::toDLPack(source));
  EXPECT_EQ(t.raw_data(), source.data_ptr());
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{0, 1, 2, 3}));

  const Tensor mine = Tensor::from_vector<std::int32_t>({4, 5, 6}, Shape{3, 1});
  const at::Tensor out = at::fromDLPack(to_dlpack(mine));
  EXPECT_EQ(out.data_ptr(), mine.raw_data());
  EXPECT_EQ(out.scalar_type(), torch::kInt32);
  EXPECT_EQ(out.sizes().vec(), (std::vector<std::int64_t>{3, 1}));
}

TEST(Torch, WhatCannotBeSharedIsRefusedSayingWhatToChange) {
  expect_error<InvalidArgumentError>([] { from_torch(at::Tensor()); }, {"from_torch", "undefined"});
  expect_error<InvalidArgumentError>([] { from_torch(torch::ones({2, 3}).t()); },
                                     {"not contiguous", "[3, 2]", "[1, 3]", ".contiguous()"});
  expect_error<InvalidArgumentError>([] { from_torch(torch::ones({2}, torch::kBool)); },
                                     {"Bool", "no DType holds", "torch::kFloat32"});
  expect_error<InvalidArgumentError>([] { from_torch(torch::ones({2}, torch::kUInt8)); }, {"Byte"});
  expect_error<InvalidArgumentError>([] { from_torch(torch::ones({2}, torch::kComplexFloat)); }, {"ComplexFloat"});
  expect_error<InvalidArgumentError>([] { from_torch(torch::eye(3).to_sparse()); }, {"Sparse", ".to_dense()"});
  expect_error<FailedPreconditionError>([] { to_torch(Tensor()); }, {"to_torch", "undefined"});
}

}  // namespace
}  // namespace distribute
