// DLPack both ways: the memory is shared (data pointers), every dtype maps, the producer's deleter
// runs exactly once when the last tensor goes (and not at all when from_dlpack refuses), and
// every refusal is typed and says what to change.
#include <gtest/gtest.h>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <vector>

#include "distribute/device/dlpack.h"
#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::expect_error;

// A DLManagedTensor over a vector of the test's, counting its deleter's calls.
struct Produced {
  std::vector<std::byte> bytes;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  int deleted = 0;
  DLManagedTensor managed{};

  Produced(DLDataType type, std::vector<std::int64_t> shape, std::int64_t elements)
      : bytes(static_cast<std::size_t>(elements * type.bits / 8 * type.lanes)), sizes(std::move(shape)) {
    DLTensor& dl = managed.dl_tensor;
    dl.data = bytes.data();
    dl.device = DLDevice{kDLCPU, 0};
    dl.ndim = static_cast<std::int32_t>(sizes.size());
    dl.dtype = type;
    dl.shape = sizes.data();
    dl.strides = nullptr;
    dl.byte_offset = 0;
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* self) { ++static_cast<Produced*>(self->manager_ctx)->deleted; };
  }
};

struct DTypeCase {
  DType dtype;
  DLDataType type;
};

class DLPackDTypes : public ::testing::TestWithParam<DTypeCase> {};

TEST_P(DLPackDTypes, FromDLPackSharesTheProducersMemory) {
  Produced produced(GetParam().type, {2, 3}, 6);
  {
    Tensor t = from_dlpack(&produced.managed);
    EXPECT_EQ(t.raw_data(), produced.bytes.data());
    EXPECT_EQ(t.dtype(), GetParam().dtype);
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(t.device(), Device::cpu());
    Tensor copy = t;
    t = Tensor();
    EXPECT_EQ(produced.deleted, 0) << "a tensor still shares the memory";
  }
  EXPECT_EQ(produced.deleted, 1);
}

TEST_P(DLPackDTypes, ToDLPackSharesTheTensorsMemory) {
  Tensor t = Tensor::zeros(GetParam().dtype, Shape{4, 1, 2});
  DLManagedTensor* managed = to_dlpack(t);
  const DLTensor& dl = managed->dl_tensor;
  EXPECT_EQ(dl.data, t.raw_data());
  EXPECT_EQ(dl.device.device_type, kDLCPU);
  EXPECT_EQ(dl.dtype.code, GetParam().type.code);
  EXPECT_EQ(dl.dtype.bits, GetParam().type.bits);
  EXPECT_EQ(dl.dtype.lanes, 1);
  ASSERT_EQ(dl.ndim, 3);
  EXPECT_EQ(std::vector<std::int64_t>(dl.shape, dl.shape + 3), (std::vector<std::int64_t>{4, 1, 2}));
  EXPECT_EQ(dl.strides, nullptr);
  EXPECT_EQ(dl.byte_offset, 0u);
  const void* data = t.raw_data();
  t = Tensor();  // the DLManagedTensor keeps the memory
  EXPECT_EQ(managed->dl_tensor.data, data);
  managed->deleter(managed);
}

INSTANTIATE_TEST_SUITE_P(EveryDType, DLPackDTypes,
                         ::testing::Values(DTypeCase{DType::kFloat32, {kDLFloat, 32, 1}},
                                           DTypeCase{DType::kFloat64, {kDLFloat, 64, 1}},
                                           DTypeCase{DType::kFloat16, {kDLFloat, 16, 1}},
                                           DTypeCase{DType::kBFloat16, {kDLBfloat, 16, 1}},
                                           DTypeCase{DType::kInt32, {kDLInt, 32, 1}},
                                           DTypeCase{DType::kInt64, {kDLInt, 64, 1}}),
                         [](const ::testing::TestParamInfo<DTypeCase>& test) {
                           return std::string(dtype_name(test.param.dtype));
                         });

TEST(DLPack, ARoundTripGivesTheSameMemoryAndValues) {
  const Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  const Tensor back = from_dlpack(to_dlpack(t));
  EXPECT_EQ(back.raw_data(), t.raw_data());
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(DLPack, ScalarsEmptyTensorsAndByteOffsets) {
  const Tensor scalar = from_dlpack(to_dlpack(Tensor::scalar<std::int64_t>(7)));
  EXPECT_EQ(scalar.shape(), Shape{});
  EXPECT_EQ(scalar.item<std::int64_t>(), 7);

  Produced empty({kDLFloat, 32, 1}, {0, 5}, 0);
  EXPECT_EQ(from_dlpack(&empty.managed).num_elements(), 0);
  EXPECT_EQ(empty.deleted, 1);

  Produced offset({kDLInt, 32, 1}, {2}, 4);
  offset.managed.dl_tensor.byte_offset = 8;
  const Tensor tail = from_dlpack(&offset.managed);
  EXPECT_EQ(tail.raw_data(), offset.bytes.data() + 8);
}

TEST(DLPack, CompactStridesAreAcceptedAndASizeOneDimensionsStrideIsIgnored) {
  Produced produced({kDLFloat, 32, 1}, {2, 1, 3}, 6);
  produced.strides = {3, 99, 1};
  produced.managed.dl_tensor.strides = produced.strides.data();
  EXPECT_EQ(from_dlpack(&produced.managed).shape(), (Shape{2, 1, 3}));
}

TEST(DLPack, AProducersTensorComesOnTheCallingReplicasDevice) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  std::vector<Produced> produced;
  produced.reserve(2);
  for (int r = 0; r < 2; ++r) produced.emplace_back(DLDataType{kDLFloat, 32, 1}, std::vector<std::int64_t>{3}, 3);
  const PerReplica<Tensor> summed = strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    const int r = ctx->replica_id_in_sync_group();
    Tensor t = from_dlpack(&produced[static_cast<std::size_t>(r)].managed);
    EXPECT_EQ(t.device(), Device::cpu(r));
    t.flat<float>().setConstant(static_cast<float>(r + 1));
    return ctx->all_reduce(ReduceOp::kSum, t);
  });
  for (const Tensor& t : summed.values()) EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{3, 3, 3}));
}

TEST(DLPack, RefusalsAreTypedSayWhatToChangeAndLeaveTheTensorToItsOwner) {
  expect_error<InvalidArgumentError>([] { from_dlpack(nullptr); }, {"from_dlpack", "null"});

  Produced uint8({kDLUInt, 8, 1}, {4}, 4);
  expect_error<InvalidArgumentError>([&] { from_dlpack(&uint8.managed); },
                                     {"uint8", "no DType holds", "float32"});
  Produced vector({kDLFloat, 32, 4}, {2}, 2);
  expect_error<InvalidArgumentError>([&] { from_dlpack(&vector.managed); }, {"float32 x 4 lanes"});
  Produced float8({kDLFloat, 8, 1}, {2}, 2);
  expect_error<InvalidArgumentError>([&] { from_dlpack(&float8.managed); }, {"float8"});

  Produced transposed({kDLFloat, 32, 1}, {2, 3}, 6);
  transposed.strides = {1, 2};
  transposed.managed.dl_tensor.strides = transposed.strides.data();
  expect_error<InvalidArgumentError>([&] { from_dlpack(&transposed.managed); },
                                     {"not contiguous", "sizes [2, 3]", "strides [1, 2]", "make it contiguous"});

  Produced negative({kDLFloat, 32, 1}, {-1}, 0);
  expect_error<InvalidArgumentError>([&] { from_dlpack(&negative.managed); }, {"negative size", "[-1]"});

  Produced gpu({kDLFloat, 32, 1}, {2}, 2);
  gpu.managed.dl_tensor.device = DLDevice{kDLCUDA, 1};
  expect_error<UnimplementedError>([&] { from_dlpack(&gpu.managed); },
                                   {"device type 2", "device 1", "host memory only", "copy the tensor to the host"});

  for (const Produced* refused : {&uint8, &vector, &float8, &transposed, &negative, &gpu}) {
    EXPECT_EQ(refused->deleted, 0) << "a refused tensor stays its owner's";
  }

  expect_error<FailedPreconditionError>([] { to_dlpack(Tensor()); }, {"to_dlpack", "undefined"});
}

}  // namespace
}  // namespace distribute
