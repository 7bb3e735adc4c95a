// The device layer below tensors: Device parsing, canonical names and ordering; DType names,
// sizes and the C++ type mapping; Shape arithmetic, indexing and printing; normalize_axis.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/semantics_util.h"

namespace distribute {
namespace {

using testing::expect_error;

struct ParsedDevice {
  const char* spec;
  Device::Type type;
  int index;
  const char* job;
  int task;
  const char* full_name;
  const char* short_name;
};

class DeviceParse : public ::testing::TestWithParam<ParsedDevice> {};

TEST_P(DeviceParse, FieldsAndCanonicalNames) {
  const ParsedDevice& p = GetParam();
  const Device d = Device::parse(p.spec);
  EXPECT_EQ(d.type(), p.type);
  EXPECT_EQ(d.is_cpu(), p.type == Device::Type::kCpu);
  EXPECT_EQ(d.is_gpu(), p.type == Device::Type::kGpu);
  EXPECT_EQ(d.index(), p.index);
  EXPECT_EQ(d.job(), p.job);
  EXPECT_EQ(d.replica(), 0);
  EXPECT_EQ(d.task(), p.task);
  EXPECT_EQ(d.to_string(), p.full_name);
  EXPECT_EQ(d.short_name(), p.short_name);
  std::ostringstream os;
  os << d;
  EXPECT_EQ(os.str(), p.full_name);
  // The canonical name is itself a valid spec naming the same device.
  EXPECT_EQ(Device::parse(d.to_string()), d);
}

INSTANTIATE_TEST_SUITE_P(
    Specs, DeviceParse,
    ::testing::Values(
        ParsedDevice{"CPU:0", Device::Type::kCpu, 0, "localhost", 0, "/job:localhost/replica:0/task:0/device:CPU:0", "CPU:0"},
        ParsedDevice{"cpu:3", Device::Type::kCpu, 3, "localhost", 0, "/job:localhost/replica:0/task:0/device:CPU:3", "CPU:3"},
        ParsedDevice{"GPU:1", Device::Type::kGpu, 1, "localhost", 0, "/job:localhost/replica:0/task:0/device:GPU:1", "GPU:1"},
        ParsedDevice{"gpu:0", Device::Type::kGpu, 0, "localhost", 0, "/job:localhost/replica:0/task:0/device:GPU:0", "GPU:0"},
        ParsedDevice{"/device:GPU:1", Device::Type::kGpu, 1, "localhost", 0, "/job:localhost/replica:0/task:0/device:GPU:1", "GPU:1"},
        ParsedDevice{"/cpu:0", Device::Type::kCpu, 0, "localhost", 0, "/job:localhost/replica:0/task:0/device:CPU:0", "CPU:0"},
        ParsedDevice{"/job:localhost/replica:0/task:0/device:CPU:0", Device::Type::kCpu, 0, "localhost", 0,
                     "/job:localhost/replica:0/task:0/device:CPU:0", "CPU:0"},
        ParsedDevice{"/job:worker/replica:0/task:2/device:GPU:3", Device::Type::kGpu, 3, "worker", 2,
                     "/job:worker/replica:0/task:2/device:GPU:3", "GPU:3"}),
    [](const ::testing::TestParamInfo<ParsedDevice>& p) { return "spec" + std::to_string(p.index); });

TEST(Device, DefaultIsCpu0) {
  const Device d;
  EXPECT_TRUE(d.is_cpu());
  EXPECT_EQ(d.index(), 0);
  EXPECT_EQ(d.to_string(), "/job:localhost/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(d, Device::cpu());
}

TEST(Device, FactoriesMatchParsedNames) {
  EXPECT_EQ(Device::cpu(), Device::parse("CPU:0"));
  EXPECT_EQ(Device::cpu(5), Device::parse("/cpu:5"));
  EXPECT_EQ(Device::gpu(), Device::parse("GPU:0"));
  EXPECT_EQ(Device::gpu(2), Device::parse("/device:gpu:2"));
  EXPECT_EQ(Device::gpu(2).short_name(), "GPU:2");
  EXPECT_EQ(Device(Device::Type::kGpu, 7), Device::gpu(7));
  expect_error<InvalidArgumentError>([] { (void)Device::cpu(-1); }, {"device index -1", "out of range"});
}

TEST(Device, EqualityComparesEveryField) {
  EXPECT_EQ(Device::parse("CPU:1"), Device::parse("cpu:1"));
  EXPECT_NE(Device::parse("CPU:1"), Device::parse("CPU:2"));
  EXPECT_NE(Device::parse("CPU:1"), Device::parse("GPU:1"));
  EXPECT_NE(Device::parse("/job:worker/replica:0/task:0/device:CPU:0"), Device::cpu(0));
  EXPECT_NE(Device::parse("/job:localhost/replica:0/task:1/device:CPU:0"), Device::cpu(0));
  EXPECT_NE(Device::parse("/job:localhost/replica:1/task:0/device:CPU:0"), Device::cpu(0));
}

// Job names are interned: equal names from separate parses compare equal, "localhost" spelled out
// equals the default, and ordering follows the names, not the order they were first seen in.
TEST(Device, JobNamesCompareByName) {
  const Device zeta = Device::parse("/job:zeta/replica:0/task:0/device:CPU:0");
  const Device alpha = Device::parse("/job:alpha/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(zeta, Device::parse("/job:zeta/replica:0/task:0/device:CPU:0"));
  EXPECT_EQ(zeta.job(), "zeta");
  EXPECT_EQ(Device::parse("/job:localhost/replica:0/task:0/device:CPU:0"), Device::cpu(0));
  EXPECT_EQ(Device::cpu(0).job(), "localhost");
  EXPECT_LT(alpha, zeta);
  EXPECT_LT(alpha, Device::cpu(0));
  EXPECT_LT(Device::cpu(0), zeta);
  EXPECT_EQ(zeta.to_string(), "/job:zeta/replica:0/task:0/device:CPU:0");
}

TEST(Device, OrderingWithinOneTaskIsByTypeThenIndex) {
  std::vector<Device> devices = {Device::gpu(1), Device::cpu(2), Device::gpu(0), Device::cpu(0), Device::cpu(10)};
  std::sort(devices.begin(), devices.end());
  std::vector<std::string> names;
  for (const Device& d : devices) names.push_back(d.short_name());
  EXPECT_EQ(names, (std::vector<std::string>{"CPU:0", "CPU:2", "CPU:10", "GPU:0", "GPU:1"}));
  EXPECT_LT(Device::cpu(0), Device::cpu(1));
  EXPECT_GT(Device::gpu(0), Device::cpu(3));
  EXPECT_LE(Device::cpu(1), Device::cpu(1));
}

class InvalidDevice : public ::testing::TestWithParam<const char*> {};

TEST_P(InvalidDevice, ThrowsQuotingTheString) {
  const std::string spec = GetParam();
  expect_error<InvalidArgumentError>([&] { (void)Device::parse(spec); },
                                          {"invalid device string \"" + spec + "\"", "expected \"CPU:0\""});
}

INSTANTIATE_TEST_SUITE_P(Specs, InvalidDevice,
                         ::testing::Values("", "CPU", "TPU:0", "CPU:-1", "CPU:x", "CPU:0:1", "/device:CPU",
                                           "foo/CPU:0", "CPU:99999999999", "/job:worker", "CPU:", ":0",
                                           "/job:/device:CPU:0", "/device:CPU:0/device:GPU:0"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return "spec" + std::to_string(p.index);
                         });

TEST(Device, InvalidStringsSayWhatIsWrong) {
  expect_error<InvalidArgumentError>([] { (void)Device::parse(""); }, {"empty"});
  expect_error<InvalidArgumentError>([] { (void)Device::parse("TPU:0"); }, {"unknown device type \"TPU\""});
  expect_error<InvalidArgumentError>([] { (void)Device::parse("CPU:-1"); }, {"device index \"-1\""});
  expect_error<InvalidArgumentError>([] { (void)Device::parse("CPU:99999999999"); },
                                          {"device index \"99999999999\"", "[0, 65536]"});
  expect_error<InvalidArgumentError>([] { (void)Device::parse("/device:CPU:0/device:GPU:0"); },
                                          {"more than one device"});
  expect_error<InvalidArgumentError>([] { (void)Device::parse("/job:worker"); }, {"names no device"});
}

TEST(DType, NamesSizesAndKinds) {
  struct Row {
    DType dtype;
    const char* name;
    std::size_t size;
    bool floating;
  };
  const Row rows[] = {{DType::kFloat32, "float32", 4, true}, {DType::kFloat64, "float64", 8, true},
                      {DType::kInt32, "int32", 4, false},    {DType::kInt64, "int64", 8, false},
                      {DType::kFloat16, "float16", 2, true}, {DType::kBFloat16, "bfloat16", 2, true}};
  for (const Row& row : rows) {
    EXPECT_STREQ(dtype_name(row.dtype), row.name);
    EXPECT_EQ(dtype_size(row.dtype), row.size) << row.name;
    EXPECT_EQ(is_floating(row.dtype), row.floating) << row.name;
    std::ostringstream os;
    os << row.dtype;
    EXPECT_EQ(os.str(), row.name);
  }
}

TEST(DType, CppTypeMapping) {
  static_assert(dtype_v<float> == DType::kFloat32);
  static_assert(dtype_v<double> == DType::kFloat64);
  static_assert(dtype_v<std::int32_t> == DType::kInt32);
  static_assert(dtype_v<std::int64_t> == DType::kInt64);
  static_assert(dtype_v<Half> == DType::kFloat16);
  static_assert(dtype_v<BFloat16> == DType::kBFloat16);
  static_assert(dtype_v<const float> == DType::kFloat32);
  static_assert(Element<float> && Element<Half> && Element<std::int64_t>);
  static_assert(!Element<bool> && !Element<char> && !Element<std::uint32_t> && !Element<Tensor>);
  // dispatch_dtype hands back the C++ type of every dtype.
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kFloat16,
                      DType::kBFloat16}) {
    EXPECT_EQ(dispatch_dtype(dtype, []<class T>(TypeTag<T>) { return dtype_v<T>; }), dtype);
    EXPECT_EQ(dispatch_dtype(dtype, []<class T>(TypeTag<T>) { return sizeof(T); }), dtype_size(dtype));
  }
}

TEST(Shape, RankAndNumElements) {
  EXPECT_EQ(Shape{}.rank(), 0);
  EXPECT_EQ(Shape{}.num_elements(), 1);
  EXPECT_EQ(Shape{6}.rank(), 1);
  EXPECT_EQ(Shape{6}.num_elements(), 6);
  EXPECT_EQ((Shape{2, 3}).num_elements(), 6);
  EXPECT_EQ((Shape{2, 3, 4}).rank(), 3);
  EXPECT_EQ((Shape{2, 3, 4}).num_elements(), 24);
  EXPECT_EQ(Shape{0}.num_elements(), 0);
  EXPECT_EQ((Shape{3, 0, 5}).num_elements(), 0);
  EXPECT_EQ((Shape{3, 0, 5}).rank(), 3);
  EXPECT_EQ(Shape(std::vector<std::int64_t>{4, 5}), (Shape{4, 5}));
  EXPECT_EQ((Shape{4, 5}).dims(), (std::vector<std::int64_t>{4, 5}));
  EXPECT_NE((Shape{4, 5}), (Shape{5, 4}));
  EXPECT_NE(Shape{}, Shape{1});
}

TEST(Shape, IndexingCountsNegativeFromTheEnd) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s[0], 2);
  EXPECT_EQ(s[1], 3);
  EXPECT_EQ(s[2], 4);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s[-2], 3);
  EXPECT_EQ(s[-3], 2);
  expect_error<OutOfRangeError>([&] { (void)s[3]; }, {"(2, 3, 4)", "[3]", "out of range for rank 3"});
  expect_error<OutOfRangeError>([&] { (void)s[-4]; }, {"[-4]", "out of range for rank 3"});
  expect_error<OutOfRangeError>([] { (void)Shape{}[0]; }, {"()", "out of range for rank 0"});
}

TEST(Shape, PrintsLikeTensorFlow) {
  EXPECT_EQ(Shape{}.to_string(), "()");
  EXPECT_EQ(Shape{6}.to_string(), "(6,)");
  EXPECT_EQ((Shape{2, 3}).to_string(), "(2, 3)");
  EXPECT_EQ((Shape{2, 0, 3}).to_string(), "(2, 0, 3)");
  EXPECT_EQ(Shape{}.compact(), "[]");
  EXPECT_EQ(Shape{6}.compact(), "[6]");
  EXPECT_EQ((Shape{2, 3}).compact(), "[2,3]");
  std::ostringstream os;
  os << Shape{2, 3} << ' ' << Shape{6} << ' ' << Shape{};
  EXPECT_EQ(os.str(), "(2, 3) (6,) ()");
}

TEST(Shape, NegativeDimensionsAreRejected) {
  expect_error<InvalidArgumentError>([] { (void)Shape{2, -3}; }, {"dimension 1 is -3", ">= 0"});
  expect_error<InvalidArgumentError>([] { (void)Shape(std::vector<std::int64_t>{-1}); },
                                          {"dimension 0 is -1"});
}

// The product of the dimensions used to wrap: (2^40, 2^40) counted 0 elements.
TEST(Shape, ElementCountsPastInt64AreRejected) {
  constexpr std::int64_t k2_40 = std::int64_t{1} << 40;
  expect_error<InvalidArgumentError>([] { (void)Shape{k2_40, k2_40}; },
                                     {"Shape: (1099511627776, 1099511627776) has more elements than an int64 counts",
                                      "dimensions multiply to more than 9223372036854775807"});
  expect_error<InvalidArgumentError>([] { (void)Shape{std::int64_t{1} << 33, std::int64_t{1} << 31}; },
                                     {"Shape: (8589934592, 2147483648) has more elements than an int64 counts"});
  // A zero dimension does not make the others' product countable: outer_size and with_dim use it.
  expect_error<InvalidArgumentError>([] { (void)Shape(std::vector<std::int64_t>{0, k2_40, k2_40}); },
                                     {"its non-zero dimensions multiply to more than"});
  expect_error<InvalidArgumentError>([] { (void)Shape{k2_40, 1}.with_dim(1, k2_40); },
                                     {"Shape: (1099511627776, 1099511627776) has more elements"});
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ((Shape{max}).num_elements(), max);
  EXPECT_EQ((Shape{std::int64_t{1} << 31, std::int64_t{1} << 31}).num_elements(), std::int64_t{1} << 62);
  EXPECT_EQ((Shape{0, k2_40}).num_elements(), 0);
}

TEST(Shape, OuterInnerAndDimEdits) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.outer_size(0), 1);
  EXPECT_EQ(s.outer_size(1), 2);
  EXPECT_EQ(s.outer_size(2), 6);
  EXPECT_EQ(s.inner_size(0), 12);
  EXPECT_EQ(s.inner_size(1), 4);
  EXPECT_EQ(s.inner_size(2), 1);
  EXPECT_EQ(s.with_dim(1, 7), (Shape{2, 7, 4}));
  EXPECT_EQ(s.with_dim(1, 7).num_elements(), 56);
  EXPECT_EQ(s.with_dim(2, 0).num_elements(), 0);
  EXPECT_EQ(s.without_dim(1).num_elements(), 8);
  EXPECT_EQ(s.without_dim(0), (Shape{3, 4}));
  EXPECT_EQ(s.without_dim(2), (Shape{2, 3}));
  EXPECT_EQ(s, (Shape{2, 3, 4}));
}

TEST(NormalizeAxis, NegativeAxesCountFromTheEnd) {
  EXPECT_EQ(normalize_axis(0, 1, "op"), 0);
  EXPECT_EQ(normalize_axis(-1, 1, "op"), 0);
  EXPECT_EQ(normalize_axis(2, 3, "op"), 2);
  EXPECT_EQ(normalize_axis(-1, 3, "op"), 2);
  EXPECT_EQ(normalize_axis(-3, 3, "op"), 0);
}

TEST(NormalizeAxis, OutOfRangeAndScalarAxesAreRejected) {
  expect_error<InvalidArgumentError>([] { (void)normalize_axis(2, 2, "gather"); },
                                          {"gather", "axis=2", "rank 2", "[-2, 2)"});
  expect_error<InvalidArgumentError>([] { (void)normalize_axis(-3, 2, "all_gather"); },
                                          {"all_gather", "axis=-3", "[-2, 2)"});
  expect_error<InvalidArgumentError>([] { (void)normalize_axis(0, 0, "reduce"); },
                                          {"reduce", "axis=0", "rank-0"});
}

}  // namespace
}  // namespace distribute

namespace distribute {
namespace {

// Ranks above the inline capacity keep their dimensions on the heap; copies stay equal and
// independent.
TEST(Shape, HighRanks) {
  const Shape seven{1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(seven.rank(), 7);
  EXPECT_EQ(seven.num_elements(), 5040);
  EXPECT_EQ(seven[-1], 7);
  EXPECT_EQ(seven.to_string(), "(1, 2, 3, 4, 5, 6, 7)");
  Shape copy = seven;
  EXPECT_EQ(copy, seven);
  EXPECT_EQ(copy.with_dim(6, 1).num_elements(), 720);
  EXPECT_EQ(copy.without_dim(0), (Shape{2, 3, 4, 5, 6, 7}));
  EXPECT_NE(copy.without_dim(0), seven);
  EXPECT_EQ(seven.dims(), (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7}));
  const Tensor t = Tensor::zeros(DType::kInt32, seven);
  EXPECT_EQ(t.shape(), seven);
  EXPECT_EQ(t.num_elements(), 5040);
}

// Inline and heap-held dimensions alike: assignment replaces, self-assignment keeps, and a
// moved-from shape is a scalar's (so it never shares or frees the dimensions it gave away).
TEST(Shape, AssignmentAndMovesOfInlineAndHeapRanks) {
  const Shape seven{1, 2, 3, 4, 5, 6, 7};
  const Shape two{2, 3};
  Shape s = two;
  s = seven;
  EXPECT_EQ(s, seven);
  s = two;
  EXPECT_EQ(s, two);
  EXPECT_EQ(s.num_elements(), 6);
  Shape& alias = s;
  s = alias;
  EXPECT_EQ(s, two);

  Shape heap = seven;
  Shape moved = std::move(heap);
  EXPECT_EQ(moved, seven);
  EXPECT_EQ(heap.rank(), 0);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(heap.num_elements(), 1);
  EXPECT_EQ(heap.to_string(), "()");
  Shape target{4};
  target = std::move(moved);
  EXPECT_EQ(target, seven);
  EXPECT_EQ(target.dims(), (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7}));
  target = Shape{5, 5};
  EXPECT_EQ(target, (Shape{5, 5}));
  EXPECT_EQ(target.num_elements(), 25);

  Shape inline_source{8, 9};
  Shape inline_moved = std::move(inline_source);
  EXPECT_EQ(inline_moved, (Shape{8, 9}));
  EXPECT_EQ(inline_source.rank(), 0);  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace distribute
