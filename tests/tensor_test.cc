// Tensor: construction, metadata, element access for every dtype, shared vs deep copies, reshape,
// the zero-copy Eigen views, device copies, TF-style printing and the error paths (wrong element
// type, undefined tensors, devices this build cannot allocate on).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <future>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "distribute/config.h"
#include "device/storage.h"
#include "distribute/device/internal/tensor_views.h"
#include "distribute/distribute.h"
#include "testing/semantics_util.h"

namespace distribute {
namespace {

using testing::expect_error;
using testing::printed;

TEST(Tensor, FromVectorWithShape) {
  const Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.device(), Device::cpu(0));
  EXPECT_EQ(t.num_elements(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(Tensor, FromVectorOnAnotherCpuDevice) {
  const Tensor t = Tensor::from_vector<std::int64_t>({7, 8}, Shape{2, 1}, Device::cpu(3));
  EXPECT_EQ(t.device(), Device::cpu(3));
  EXPECT_EQ(t.dtype(), DType::kInt64);
  EXPECT_EQ(t.nbytes(), 16u);
  EXPECT_EQ(t.to_vector<std::int64_t>(), (std::vector<std::int64_t>{7, 8}));
}

TEST(Tensor, FromVectorRejectsAWrongCount) {
  expect_error<InvalidArgumentError>(
      [] { (void)Tensor::from_vector<float>({1, 2, 3, 4, 5}, Shape{2, 3}); },
      {"from_vector", "5 values", "(2, 3)", "holds 6 elements"});
  expect_error<InvalidArgumentError>([] { (void)Tensor::from_vector<std::int32_t>({}, Shape{}); },
                                          {"0 values", "()", "holds 1 elements"});
}

TEST(Tensor, FromVectorWithoutShapeIsRank1) {
  const Tensor t = Tensor::from_vector<std::int32_t>({1, 2, 3});
  EXPECT_EQ(t.dtype(), DType::kInt32);
  EXPECT_EQ(t.shape(), Shape{3});
  EXPECT_EQ(t.rank(), 1);
  EXPECT_EQ(t.nbytes(), 12u);
  const Tensor none = Tensor::from_vector<double>({});
  EXPECT_EQ(none.shape(), Shape{0});
  EXPECT_EQ(none.num_elements(), 0);
  EXPECT_EQ(none.nbytes(), 0u);
  EXPECT_TRUE(none.to_vector<double>().empty());
}

TEST(Tensor, ScalarIsRank0) {
  const Tensor t = Tensor::scalar<double>(2.5);
  EXPECT_EQ(t.dtype(), DType::kFloat64);
  EXPECT_EQ(t.shape(), Shape{});
  EXPECT_EQ(t.rank(), 0);
  EXPECT_EQ(t.num_elements(), 1);
  EXPECT_EQ(t.nbytes(), 8u);
  EXPECT_EQ(t.item<double>(), 2.5);
  EXPECT_EQ(Tensor::scalar<std::int32_t>(4, Device::cpu(2)).device(), Device::cpu(2));
}

TEST(Tensor, ZerosAndEmpty) {
  const Tensor z = Tensor::zeros(DType::kFloat64, Shape{2, 2}, Device::cpu(1));
  EXPECT_EQ(z.dtype(), DType::kFloat64);
  EXPECT_EQ(z.shape(), (Shape{2, 2}));
  EXPECT_EQ(z.device(), Device::cpu(1));
  EXPECT_EQ(z.to_vector<double>(), (std::vector<double>(4, 0.0)));
  const Tensor e = Tensor::empty(DType::kInt32, Shape{3, 4});
  EXPECT_EQ(e.shape(), (Shape{3, 4}));
  EXPECT_EQ(e.nbytes(), 48u);
  EXPECT_NE(e.raw_data(), nullptr);
  const Tensor no_elements = Tensor::empty(DType::kFloat32, Shape{0, 5});
  EXPECT_EQ(no_elements.num_elements(), 0);
  EXPECT_EQ(no_elements.nbytes(), 0u);
  EXPECT_EQ(no_elements.raw_data(), nullptr);
  EXPECT_EQ(Tensor::zeros(DType::kBFloat16, Shape{0}).nbytes(), 0u);
}

template <class T>
class TensorElements : public ::testing::Test {};
using ElementTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, Half, BFloat16>;
TYPED_TEST_SUITE(TensorElements, ElementTypes);

TYPED_TEST(TensorElements, RoundTripAndItem) {
  using T = TypeParam;
  const std::vector<T> values = {T(1), T(-2), T(3), T(0), T(5), T(6)};
  const Tensor t = Tensor::from_vector<T>(values, Shape{3, 2});
  EXPECT_EQ(t.dtype(), dtype_v<T>);
  EXPECT_EQ(t.nbytes(), 6 * sizeof(T));
  EXPECT_EQ(t.to_vector<T>(), values);
  EXPECT_EQ(Tensor::scalar<T>(T(7)).template item<T>(), T(7));
  // item() needs one element, not rank 0.
  EXPECT_EQ(Tensor::from_vector<T>({T(9)}, Shape{1, 1}).template item<T>(), T(9));
  EXPECT_EQ(t.template data<T>()[1], T(-2));
  EXPECT_EQ(t.template flat<T>()(4), T(5));
}

// A shape whose bytes overflow used to allocate their wrapped count: an empty tensor.
TEST(Tensor, BytesPastSizeTAreRejected) {
  const Shape huge{std::int64_t{1} << 62};
  expect_error<InvalidArgumentError>([&] { (void)Tensor::zeros(DType::kFloat32, huge, Device::cpu()); },
                                     {"Tensor::empty: 4611686018427387904 elements of float32 (shape "
                                      "(4611686018427387904,)) take more bytes than a size_t counts"});
  expect_error<InvalidArgumentError>([&] { (void)Tensor::empty(DType::kFloat64, huge, Device::cpu()); },
                                     {"Tensor::empty", "elements of float64"});
  float x = 0;
  expect_error<InvalidArgumentError>([&] { (void)Tensor::from_blob(&x, huge); },
                                     {"Tensor::from_blob", "take more bytes than a size_t counts"});
  expect_error<InvalidArgumentError>(
      [] { (void)Tensor::zeros(DType::kFloat32, Shape{std::int64_t{1} << 33, std::int64_t{1} << 31}); },
      {"has more elements than an int64 counts"});
}

TEST(Tensor, HalfPrecisionValuesKeepTheirRounding) {
  // 0.1 is not exact in either 16-bit type: what comes back is the 16-bit value, not 0.1f.
  const Tensor h = Tensor::scalar<Half>(Half(0.1f));
  EXPECT_EQ(static_cast<float>(h.item<Half>()), 0.0999755859375f);
  const Tensor b = Tensor::scalar<BFloat16>(BFloat16(0.1f));
  EXPECT_EQ(static_cast<float>(b.item<BFloat16>()), 0.10009765625f);
}

TEST(Tensor, ItemNeedsExactlyOneElement) {
  const Tensor t = Tensor::from_vector<float>({1, 2, 3});
  expect_error<InvalidArgumentError>([&] { (void)t.item<float>(); },
                                          {"item", "(3,)", "3 elements", "exactly one"});
  expect_error<InvalidArgumentError>([] { (void)Tensor::from_vector<float>({}).item<float>(); },
                                          {"(0,)", "0 elements"});
}

TEST(Tensor, WrongElementTypeIsRejected) {
  const Tensor t = Tensor::from_vector<float>({1, 2});
  expect_error<InvalidArgumentError>([&] { (void)t.to_vector<std::int32_t>(); },
                                          {"to_vector<int32>", "holds float32"});
  expect_error<InvalidArgumentError>([&] { (void)t.to_vector<double>(); },
                                          {"to_vector<float64>", "holds float32"});
  expect_error<InvalidArgumentError>([] { (void)Tensor::scalar<float>(1).item<Half>(); },
                                          {"float16", "holds float32"});
  expect_error<InvalidArgumentError>([&] { (void)t.data<std::int64_t>(); },
                                          {"data<int64>", "holds float32"});
  expect_error<InvalidArgumentError>([&] { (void)t.flat<BFloat16>(); }, {"bfloat16", "holds float32"});
}

TEST(Tensor, CopiesShareStorage) {
  Tensor a = Tensor::from_vector<std::int32_t>({1, 2, 3, 4});
  Tensor b = a;
  EXPECT_TRUE(a.same_storage(b));
  EXPECT_EQ(a.raw_data(), b.raw_data());
  b.flat<std::int32_t>()(2) = 30;
  EXPECT_EQ(a.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 30, 4}));
  Tensor c;
  c = a;
  a.data<std::int32_t>()[0] = 10;
  EXPECT_EQ(c.to_vector<std::int32_t>(), (std::vector<std::int32_t>{10, 2, 30, 4}));
}

// The outputs of a collective are views of one block whose references are taken all at once
// (detail::TensorViews). Each view still owns its own reference: the block goes back exactly once,
// when the last view, copy or moved-to tensor is dropped, whatever the order, and references
// taken but not handed out are given back with the maker.
TEST(Tensor, ViewsOfOneBlockEachHoldTheirOwnReference) {
  std::vector<float> memory(8, 1.5f);
  int releases = 0;
  std::vector<Tensor> views;
  {
    detail::StorageRef block = detail::make_storage(memory.data(), memory.size() * sizeof(float), Device::cpu(),
                                                        [&](void*, std::size_t) { ++releases; });
    detail::TensorViews maker(block, 5);
    for (std::size_t i = 0; i < 3; ++i) views.push_back(maker.make(i * 2 * sizeof(float), DType::kFloat32, Shape{2}));
  }
  EXPECT_EQ(releases, 0);
  ASSERT_EQ(views.size(), 3u);
  EXPECT_TRUE(views[0].same_storage(views[2]));
  EXPECT_EQ(views[1].data<float>(), memory.data() + 2);
  EXPECT_EQ(views[2].to_vector<float>(), (std::vector<float>{1.5f, 1.5f}));
  Tensor copy = views[1];
  Tensor moved = std::move(views[2]);
  views.clear();
  EXPECT_EQ(releases, 0);
  EXPECT_EQ(copy.to_vector<float>(), (std::vector<float>{1.5f, 1.5f}));
  copy = Tensor();
  EXPECT_EQ(releases, 0);
  moved = Tensor();
  EXPECT_EQ(releases, 1);
}

// Counts how often its block goes back; views() makes `count` views of 2 floats.
class CountedBlock {
 public:
  CountedBlock() {
    ref_ = detail::make_storage(memory_.data(), memory_.size() * sizeof(float), Device::cpu(),
                                    [this](void*, std::size_t) { ++releases_; });
  }
  std::vector<Tensor> views(std::size_t count) {
    detail::TensorViews maker(ref_, count);
    std::vector<Tensor> out;
    for (std::size_t i = 0; i < count; ++i) out.push_back(maker.make(i * 2 * sizeof(float), DType::kFloat32, Shape{2}));
    ref_ = detail::StorageRef();  // the views hold the only references
    return out;
  }
  int releases() const { return releases_.load(); }

 private:
  std::vector<float> memory_ = std::vector<float>(8, 0.5f);
  detail::StorageRef ref_;
  std::atomic<int> releases_{0};
};

// Inside a ReleaseBatch (a replica's step) dropped references are given back together, yet a
// block still goes back with its last reference: at once when this thread held them all, when
// the thread moves on to another block, and at the latest when the batch ends.
TEST(Tensor, ReleaseBatchStillFreesEachBlockOnce) {
  CountedBlock own;
  CountedBlock shared;
  CountedBlock next;
  CountedBlock other_thread_last;
  {
    detail::ReleaseBatch batch;
    std::vector<Tensor> views = own.views(3);
    views.pop_back();
    views.pop_back();
    EXPECT_EQ(own.releases(), 0);
    views.clear();
    EXPECT_EQ(own.releases(), 1) << "every reference was this thread's: the block goes at once";

    std::vector<Tensor> last = other_thread_last.views(2);
    Tensor handed_over = std::move(last[1]);
    last.clear();  // one of two references dropped here
    EXPECT_EQ(other_thread_last.releases(), 0);
    next.views(1).clear();  // moving on to another block gives the first one's back
    EXPECT_EQ(next.releases(), 1);
    std::thread([held = std::move(handed_over)]() mutable { held = Tensor(); }).join();
    EXPECT_EQ(other_thread_last.releases(), 1) << "the other thread held the last reference";

    std::vector<Tensor> shared_views = shared.views(2);
    Tensor elsewhere = shared_views[1];
    shared_views.clear();
    std::thread([held = std::move(elsewhere)]() mutable { held = Tensor(); }).join();
    EXPECT_EQ(shared.releases(), 0) << "this thread's dropped references are still counted";
  }
  EXPECT_EQ(shared.releases(), 1) << "the batch's end gives the rest back";
  EXPECT_EQ(own.releases(), 1);
  EXPECT_EQ(next.releases(), 1);
  EXPECT_EQ(other_thread_last.releases(), 1);
}

// A thread keeps the last small host blocks it freed and takes one back for the next request of
// the same size, without the pool's lock: a replica's loss or metric each step reuses the block
// of the step before. Sizes differ from every other test's so that no cached block interferes.
TEST(HostMemory, AThreadTakesBackTheSmallBlockItFreedLast) {
  const Device cpu = Device::cpu(5);
  void* first = nullptr;
  {
    detail::StorageRef block = detail::allocate_storage(cpu, 44);
    first = block->data();
  }
  detail::StorageRef other_size = detail::allocate_storage(cpu, 52);
  EXPECT_NE(other_size->data(), first) << "a block goes only to a request of its own size";
  detail::StorageRef again = detail::allocate_storage(cpu, 44);
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(again->nbytes(), 44u);
}

// A block a thread freed stays with that thread (another thread's request of the same size gets
// a different block) until the thread ends, when its blocks go back to their pool.
TEST(HostMemory, ASmallBlockStaysWithTheThreadThatFreedItUntilItEnds) {
  const Device cpu = Device::cpu(6);
  std::promise<void*> freed;
  std::promise<void> may_end;
  std::thread thread([&] {
    void* data = nullptr;
    {
      detail::StorageRef block = detail::allocate_storage(cpu, 36);
      data = block->data();
    }
    freed.set_value(data);
    may_end.get_future().wait();
  });
  void* const freed_block = freed.get_future().get();
  detail::StorageRef while_alive = detail::allocate_storage(cpu, 36);
  EXPECT_NE(while_alive->data(), freed_block);
  may_end.set_value();
  thread.join();
  detail::StorageRef after_end = detail::allocate_storage(cpu, 36);
  EXPECT_EQ(after_end->data(), freed_block);
}

// Each replica's step runs in a ReleaseBatch that ends before run() returns: copies the replicas
// took and dropped no longer count once run() is back, so the caller's own drop frees the block.
TEST(Tensor, ReplicaStepsGiveTheirReferencesBackBeforeRunReturns) {
  CountedBlock block;
  Tensor t = std::move(block.views(1)[0]);
  MirroredStrategy strategy({"CPU:0", "CPU:1", "CPU:2"});
  strategy.run([&] {
    Tensor mine = t;
    EXPECT_EQ(mine.to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
  });
  EXPECT_EQ(block.releases(), 0);
  t = Tensor();
  EXPECT_EQ(block.releases(), 1);
}

// A host tensor seen as another CPU device's: how a CPU replica's batch reports its replica's device.
TEST(Tensor, ViewOnAnotherCpuSharesTheMemoryAndReportsThatDevice) {
  Tensor original = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2});
  const Tensor row = original.slice(1, 2);
  const Tensor view = row.view_on(Device::cpu(3));
  EXPECT_EQ(view.device(), Device::cpu(3));
  EXPECT_EQ(view.raw_data(), row.raw_data());
  EXPECT_EQ(view.shape(), (Shape{1, 2}));
  EXPECT_TRUE(view.same_storage(original));
  EXPECT_TRUE(original.same_storage(view));
  EXPECT_TRUE(view.view_on(Device::cpu(1)).same_storage(original));
  EXPECT_FALSE(view.same_storage(original.clone()));
  original = Tensor();
  EXPECT_EQ(view.to_vector<float>(), (std::vector<float>{3, 4})) << "the view keeps the memory alive";
  EXPECT_EQ(view.to(Device::cpu(0)).device(), Device::cpu(0));
}

TEST(Tensor, ViewOnAGpuIsAnInvalidArgument) {
  expect_error<InvalidArgumentError>([] { Tensor::from_vector<float>({1, 2}).view_on(Device::gpu(0)); },
                                     {"Tensor::view_on: a tensor on CPU:0 cannot be seen as one of GPU:0 without a "
                                      "copy; view_on relabels host memory for another CPU device (use to() to copy)"});
}

TEST(Tensor, CloneIsDeep) {
  const Tensor a = Tensor::from_vector<double>({1.5, 2.5}, Shape{2}, Device::cpu(2));
  Tensor b = a.clone();
  EXPECT_FALSE(a.same_storage(b));
  EXPECT_NE(a.raw_data(), b.raw_data());
  EXPECT_EQ(b.device(), Device::cpu(2));
  EXPECT_EQ(b.shape(), a.shape());
  EXPECT_EQ(b.dtype(), a.dtype());
  b.flat<double>()(0) = -1;
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{-1, 2.5}));
}

TEST(Tensor, ReshapeSharesStorageAndChecksTheCount) {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6});
  Tensor m = a.reshape(Shape{2, 3});
  EXPECT_TRUE(m.same_storage(a));
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.shape(), Shape{6});
  m.matrix<float>()(1, 0) = 40;
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 40, 5, 6}));
  EXPECT_EQ(Tensor::scalar<float>(1).reshape(Shape{1, 1}).shape(), (Shape{1, 1}));
  expect_error<InvalidArgumentError>([&] { (void)a.reshape(Shape{4, 2}); },
                                          {"reshape", "6 elements", "(6,)", "(4, 2)", "8 elements"});
}

TEST(Tensor, SliceIsAViewOfRowsOfDimensionZero) {
  const Tensor a = Tensor::from_vector<std::int32_t>({0, 1, 2, 3, 4, 5, 6, 7}, Shape{4, 2});
  Tensor middle = a.slice(1, 3);
  EXPECT_TRUE(middle.same_storage(a));
  EXPECT_EQ(middle.shape(), (Shape{2, 2}));
  EXPECT_EQ(middle.dtype(), DType::kInt32);
  EXPECT_EQ(middle.raw_data(), a.data<std::int32_t>() + 2);
  EXPECT_EQ(middle.to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 3, 4, 5}));
  middle.flat<std::int32_t>()(0) = 20;
  EXPECT_EQ(a.to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1, 20, 3, 4, 5, 6, 7}));

  // A slice of a slice counts from the slice's first row; empty slices keep the trailing shape.
  EXPECT_EQ(middle.slice(1, 2).to_vector<std::int32_t>(), (std::vector<std::int32_t>{4, 5}));
  const Tensor none = a.slice(4, 4);
  EXPECT_EQ(none.shape(), (Shape{0, 2}));
  EXPECT_EQ(none.num_elements(), 0);
  EXPECT_EQ(a.slice(0, 4).to_vector<std::int32_t>(), a.to_vector<std::int32_t>());
  EXPECT_EQ(Tensor::from_vector<double>({1.5, 2.5, 3.5}).slice(2, 3).to_vector<double>(), std::vector<double>{3.5});
}

TEST(Tensor, SliceChecksItsRows) {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, Shape{4, 3});
  expect_error<OutOfRangeError>([&] { (void)a.slice(2, 5); },
                                {"Tensor::slice: rows [2, 5) are not within the 4 rows of shape (4, 3)",
                                 "use 0 <= begin <= end <= 4"});
  expect_error<OutOfRangeError>([&] { (void)a.slice(-1, 1); }, {"rows [-1, 1) are not within the 4 rows"});
  expect_error<OutOfRangeError>([&] { (void)a.slice(3, 2); }, {"rows [3, 2) are not within the 4 rows"});
  expect_error<InvalidArgumentError>([] { (void)Tensor::scalar(1.0f).slice(0, 0); },
                                     {"Tensor::slice: the tensor has shape () (a scalar)",
                                      "slice() takes rows of dimension 0"});
  expect_error<FailedPreconditionError>([] { (void)Tensor().slice(0, 0); }, {"Tensor::slice", "undefined"});
}

TEST(Tensor, EigenViewsAreZeroCopy) {
  Tensor t = Tensor::from_vector<std::int64_t>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  auto flat = t.flat<std::int64_t>();
  EXPECT_EQ(flat.size(), 6);
  EXPECT_EQ(flat.data(), t.raw_data());
  flat *= 10;
  EXPECT_EQ(t.to_vector<std::int64_t>(), (std::vector<std::int64_t>{10, 20, 30, 40, 50, 60}));

  auto m = t.matrix<std::int64_t>();
  EXPECT_EQ(m.rows(), 2);
  EXPECT_EQ(m.cols(), 3);
  EXPECT_EQ(m.data(), t.raw_data());
  // Row-major, as the elements are laid out.
  EXPECT_EQ(m(0, 2), 30);
  EXPECT_EQ(m(1, 0), 40);
  m.row(1).setConstant(7);
  m(0, 0) = -1;
  EXPECT_EQ(t.to_vector<std::int64_t>(), (std::vector<std::int64_t>{-1, 20, 30, 7, 7, 7}));
}

TEST(Tensor, MatrixNeedsRank2) {
  const Tensor t = Tensor::from_vector<float>({1, 2, 3});
  expect_error<InvalidArgumentError>([&] { (void)t.matrix<float>(); },
                                          {"matrix", "rank 1", "(3,)", "needs rank 2"});
}

TEST(Tensor, ToAnotherCpuDeviceCopies) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, Shape{3}, Device::cpu(0));
  const Tensor b = a.to(Device::cpu(1));
  EXPECT_EQ(b.device(), Device::cpu(1));
  EXPECT_FALSE(b.same_storage(a));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  a.flat<float>()(0) = 100;
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  // Even to the same device, to() is a copy.
  EXPECT_FALSE(a.to(Device::cpu(0)).same_storage(a));
}

TEST(TensorPrint, ScalarFloat) {
  EXPECT_EQ(printed(Tensor::scalar<float>(2.0f)), "<Tensor: shape=(), dtype=float32, numpy=2.0>");
  EXPECT_EQ(printed(Tensor::scalar<std::int64_t>(-5)), "<Tensor: shape=(), dtype=int64, numpy=-5>");
  EXPECT_EQ(printed(Tensor::scalar<double>(0.5)), "<Tensor: shape=(), dtype=float64, numpy=0.5>");
}

TEST(TensorPrint, IntVector) {
  EXPECT_EQ(printed(Tensor::from_vector<std::int32_t>({1, 2, 3, 1, 2, 3})),
            "<Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>");
  EXPECT_EQ(printed(Tensor::from_vector<float>({})), "<Tensor: shape=(0,), dtype=float32, numpy=[]>");
}

// Like TF, arrays of rank 2 and more start on a new line after "numpy=", one row per line.
TEST(TensorPrint, Matrices) {
  EXPECT_EQ(printed(Tensor::from_vector<std::int32_t>({1, 2, 3, 4}, Shape{2, 2})),
            "<Tensor: shape=(2, 2), dtype=int32, numpy=\n"
            "[[1, 2],\n"
            " [3, 4]]>");
  EXPECT_EQ(printed(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 2, 2})),
            "<Tensor: shape=(2, 2, 2), dtype=float32, numpy=\n"
            "[[[1.0, 2.0],\n"
            "  [3.0, 4.0]],\n"
            " [[5.0, 6.0],\n"
            "  [7.0, 8.0]]]>");
  EXPECT_EQ(printed(Tensor::zeros(DType::kInt32, Shape{2, 0})),
            "<Tensor: shape=(2, 0), dtype=int32, numpy=\n"
            "[[],\n"
            " []]>");
}

TEST(TensorPrint, SpecialFloats) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(printed(Tensor::from_vector<float>({0.1f, 1e-07f, inf, -inf, std::nanf(""), -0.0f, 1.5f})),
            "<Tensor: shape=(7,), dtype=float32, numpy=[0.1, 1e-07, inf, -inf, nan, -0.0, 1.5]>");
  EXPECT_EQ(printed(Tensor::from_vector<double>({0.1, 1.0 / 3, 1e300, 1e16})),
            "<Tensor: shape=(4,), dtype=float64, numpy=[0.1, 0.3333333333333333, 1e+300, 1e+16]>");
}

// Python's repr (what the header promises) writes floats in positional notation from 1e-4 up to
// 1e16 and adds ".0" to integral values: 100000.0, not 1e+05.
TEST(TensorPrint, FloatsUsePythonReprNotation) {
  EXPECT_EQ(printed(Tensor::from_vector<float>({100000.0f, 0.0001f, 2e6f, 10000.0f})),
            "<Tensor: shape=(4,), dtype=float32, numpy=[100000.0, 0.0001, 2000000.0, 10000.0]>");
  EXPECT_EQ(printed(Tensor::scalar<double>(1e15)),
            "<Tensor: shape=(), dtype=float64, numpy=1000000000000000.0>");
}

// The shortest text that reads back to the same 16-bit value, as numpy prints float16.
TEST(TensorPrint, HalfPrecisionFloatsPrintTheirShortestText) {
  EXPECT_EQ(printed(Tensor::scalar<Half>(Half(1.5f))), "<Tensor: shape=(), dtype=float16, numpy=1.5>");
  EXPECT_EQ(printed(Tensor::scalar<BFloat16>(BFloat16(2.0f))), "<Tensor: shape=(), dtype=bfloat16, numpy=2.0>");
  EXPECT_EQ(printed(Tensor::scalar<Half>(Half(0.1f))), "<Tensor: shape=(), dtype=float16, numpy=0.1>");
  EXPECT_EQ(printed(Tensor::scalar<BFloat16>(BFloat16(0.1f))), "<Tensor: shape=(), dtype=bfloat16, numpy=0.1>");
}

TEST(TensorPrint, LargeTensorsAreSummarised) {
  std::vector<std::int32_t> values(2000);
  std::iota(values.begin(), values.end(), 0);
  EXPECT_EQ(printed(Tensor::from_vector(values)),
            "<Tensor: shape=(2000,), dtype=int32, numpy=[0, 1, 2, ..., 1997, 1998, 1999]>");
  EXPECT_EQ(printed(Tensor::from_vector(values, Shape{2, 1000})),
            "<Tensor: shape=(2, 1000), dtype=int32, numpy=\n"
            "[[0, 1, 2, ..., 997, 998, 999],\n"
            " [1000, 1001, 1002, ..., 1997, 1998, 1999]]>");
  EXPECT_EQ(printed(Tensor::from_vector(values, Shape{1000, 2})),
            "<Tensor: shape=(1000, 2), dtype=int32, numpy=\n"
            "[[0, 1],\n"
            " [2, 3],\n"
            " [4, 5],\n"
            " ...,\n"
            " [1994, 1995],\n"
            " [1996, 1997],\n"
            " [1998, 1999]]>");
  // Up to 1000 elements everything is printed, as numpy does.
  values.resize(1000);
  const std::string all = printed(Tensor::from_vector(values));
  EXPECT_EQ(all.find("..."), std::string::npos);
  EXPECT_NE(all.find("996, 997, 998, 999]>"), std::string::npos);
}

TEST(Tensor, UndefinedTensor) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(printed(t), "<Tensor: undefined>");
  const std::vector<std::string> words = {"undefined", "default-constructed"};
  expect_error<FailedPreconditionError>([&] { (void)t.device(); }, words);
  expect_error<FailedPreconditionError>([&] { (void)t.raw_data(); }, words);
  expect_error<FailedPreconditionError>([&] { (void)t.to_vector<float>(); }, words);
  expect_error<FailedPreconditionError>([&] { (void)t.item<float>(); }, words);
  expect_error<FailedPreconditionError>([&] { (void)t.data<float>(); }, words);
  expect_error<FailedPreconditionError>([&] { (void)t.flat<float>(); }, words);
  expect_error<FailedPreconditionError>([&] { (void)t.clone(); }, words);
  expect_error<FailedPreconditionError>([&] { (void)t.to(Device::cpu(1)); }, words);
  expect_error<FailedPreconditionError>([&] { (void)t.reshape(Shape{}); }, words);
}

TEST(Tensor, GpuDevicesAreUnimplementedInThisBuild) {
  if (DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has a GPU backend";
  const std::vector<std::string> words = {"GPU:0", "no GPU backend"};
  expect_error<UnimplementedError>([] { (void)Tensor::scalar<float>(1, Device::gpu(0)); }, words);
  expect_error<UnimplementedError>([] { (void)Tensor::empty(DType::kFloat32, Shape{2}, Device::gpu(0)); },
                                        words);
  expect_error<UnimplementedError>([] { (void)Tensor::zeros(DType::kInt32, Shape{0}, Device::gpu(0)); },
                                        words);
  expect_error<UnimplementedError>([] { (void)Tensor::from_vector<float>({1}).to(Device::gpu(0)); },
                                        words);
}

}  // namespace
}  // namespace distribute
