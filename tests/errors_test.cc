// docs/errors.md, row by row: one test per row, named after the row's ID, that provokes the
// situation and checks the exact exception type and the row's key words; and a test that the doc's
// table, the expectations below and the registered tests list the same rows, so they cannot drift.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "distribute/config.h"
#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_error;
using testing::Watchdog;

constexpr std::chrono::milliseconds kHangLimit{20000};

struct Row {
  std::string id;
  std::string type;
  std::vector<std::string> key_words;
  bool operator==(const Row&) const = default;
};

// What docs/errors.md says of each row: the error type and the message's key words.
const std::vector<Row>& expected_rows() {
  static const std::vector<Row> rows = {
      {"E01", "InvalidArgumentError", {"invalid device string \"\"", "it is empty"}},
      {"E02", "InvalidArgumentError", {"invalid device string \"CPU\"", "has no ':'"}},
      {"E03", "InvalidArgumentError", {"invalid device string \"CPU:0/GPU:1\"", "a short name is TYPE:INDEX"}},
      {"E04",
       "InvalidArgumentError",
       {"invalid device string \"TPU:0\"", "unknown device type \"TPU\" (CPU and GPU are known)"}},
      {"E05", "InvalidArgumentError", {"invalid device string", "is not an integer in [0, 65536]"}},
      {"E06", "InvalidArgumentError", {"invalid device string \"/device:CPU\"", "the device part needs TYPE:INDEX"}},
      {"E07", "InvalidArgumentError", {"invalid device string \"/job:/device:CPU:0\"", "the job name is empty"}},
      {"E08", "InvalidArgumentError", {"it names no device type and index"}},
      {"E09",
       "InvalidArgumentError",
       {"invalid device string \"/device:CPU:0/device:GPU:1\"", "it names more than one device"}},
      {"E10", "InvalidArgumentError", {"device index -1 is out of range [0, 65536]"}},
      {"E11", "InvalidArgumentError", {"invalid device string", "expected \"CPU:0\", \"GPU:1\""}},
      {"E12", "InvalidArgumentError", {"is listed twice (as CPU:0)", "each replica needs its own device"}},
      {"E13",
       "UnimplementedError",
       {"MirroredStrategy: device \"GPU:0\" is a GPU and this build of distribute has no GPU backend",
        "-DDISTRIBUTE_WITH_CUDA=ON"}},
      {"E14", "UnimplementedError", {"OneDeviceStrategy(\"GPU:0\"): this build of distribute has no GPU backend"}},
      {"E15", "UnimplementedError", {"cannot allocate on GPU:0", "no GPU backend"}},
      {"E16", "InvalidArgumentError", {"Shape: dimension 1 is -1; dimensions must be >= 0"}},
      {"E17", "OutOfRangeError", {"index out of range for rank 2"}},
      {"E18",
       "InvalidArgumentError",
       {"Tensor::from_vector: 5 values do not fill shape (2, 3), which holds 6 elements"}},
      {"E19",
       "InvalidArgumentError",
       {"Tensor::item: the tensor has shape (3,) (3 elements); item() needs exactly one"}},
      {"E20", "InvalidArgumentError", {"Tensor::to_vector<int32>: the tensor holds float32"}},
      {"E21", "InvalidArgumentError", {"Tensor::data<float64>: the tensor holds float32"}},
      {"E22",
       "InvalidArgumentError",
       {"Tensor::matrix: the tensor has rank 1", "matrix() needs rank 2, reshape() first"}},
      {"E23", "InvalidArgumentError", {"Tensor::reshape: cannot view 6 elements of shape (2, 3) as shape (4,)"}},
      {"E24",
       "FailedPreconditionError",
       {"the tensor is undefined (default-constructed)", "create it with Tensor::from_vector"}},
      {"E25", "InvalidArgumentError", {"distributed values need one value per replica; got an empty list"}},
      {"E26", "OutOfRangeError", {"replica 2 does not exist: these distributed values have 2 replicas"}},
      {"E27", "InvalidArgumentError", {"ValueContext: num_replicas_in_sync is 0; it must be >= 1"}},
      {"E28", "InvalidArgumentError", {"ValueContext: replica_id_in_sync_group 2 is not in [0, 2)"}},
      {"E29", "InvalidArgumentError", {"InputContext: num_input_pipelines is 0; it must be >= 1"}},
      {"E30", "InvalidArgumentError", {"InputContext: input_pipeline_id 2 is not in [0, 2)"}},
      {"E31", "InvalidArgumentError", {"InputContext: num_replicas_in_sync is 0; it must be >= 1"}},
      {"E32",
       "InvalidArgumentError",
       {"the global batch size 10 is not divisible by num_replicas_in_sync 4",
        "choose a global batch size that is a multiple of 4"}},
      {"E33", "InvalidArgumentError", {"the global batch size -8 is negative"}},
      {"E34", "InvalidArgumentError", {"unknown reduce op", "use \"SUM\" or \"MEAN\" (any letter case)"}},
      {"E35",
       "InvalidArgumentError",
       {"Strategy::reduce: axis=2 is out of range for a value of rank 2; use an axis in [-2, 2)"}},
      {"E36", "InvalidArgumentError", {"Strategy::reduce: axis=0 given for a rank-0 value; scalars have no axis"}},
      {"E37",
       "InvalidArgumentError",
       {"Strategy::gather: axis=-3 is out of range for a value of rank 2; use an axis in [-2, 2)"}},
      {"E38",
       "InvalidArgumentError",
       {"Strategy::gather: the values have rank 0 (scalars)", "reshape them to shape (1,) first"}},
      {"E39", "InvalidArgumentError", {"Strategy::reduce: replica 1 has dtype int32 but replica 0 has float32"}},
      {"E40",
       "InvalidArgumentError",
       {"Strategy::reduce: replica 1 has shape (2, 1) but replica 0 has (2,); the ranks must agree"}},
      {"E41",
       "InvalidArgumentError",
       {"Strategy::reduce: replica 1 has shape (3,) but replica 0 has (2,)",
        "with axis=None the shapes must be equal"}},
      {"E42",
       "InvalidArgumentError",
       {"Strategy::reduce: replica 1 has shape (3, 3) but replica 0 has (2, 2); the shapes may differ only along "
        "axis"}},
      {"E43", "InvalidArgumentError", {"Strategy::gather: replica 1 has dtype float64 but replica 0 has float32"}},
      {"E44",
       "InvalidArgumentError",
       {"Strategy::gather: replica 1 has shape (2, 3) but replica 0 has (2, 2); the shapes may differ only along "
        "axis"}},
      {"E45", "InvalidArgumentError", {"the value of replica 1 is an undefined Tensor"}},
      {"E46",
       "InvalidArgumentError",
       {"cannot be reduced with SUM over the 2 replicas of MirroredStrategy(CPU:0, CPU:1)",
        "pass a PerReplica or use MEAN"}},
      {"E47", "InvalidArgumentError", {"Strategy::reduce", "values for 3 replicas", "has 2"}},
      {"E48", "InvalidArgumentError", {"Strategy::gather", "values for 3 replicas", "has 2"}},
      {"E49",
       "InvalidArgumentError",
       {"run: argument 1 holds values for 3 replicas but MirroredStrategy(CPU:0, CPU:1) has 2; create it with this "
        "strategy"}},
      {"E50",
       "InvalidArgumentError",
       {"extended().update: the variable has 3 components but the strategy has 2 replicas"}},
      {"E51",
       "FailedPreconditionError",
       {"run requires being in cross-replica context, use get_replica_context()->merge_call()",
        "a replica cannot start another run"}},
      {"E52",
       "FailedPreconditionError",
       {"reduce requires being in cross-replica context, use get_replica_context()->merge_call()"}},
      {"E53",
       "FailedPreconditionError",
       {"Strategy::gather requires being in cross-replica context",
        "inside a replica use get_replica_context()->all_gather() instead"}},
      {"E54",
       "FailedPreconditionError",
       {"requires being in cross-replica context, use get_replica_context()->merge_call()"}},
      {"E55",
       "FailedPreconditionError",
       {"Strategy::scope requires being in cross-replica context", "a replica cannot enter a scope"}},
      {"E56",
       "FailedPreconditionError",
       {"Strategy::scope: Mixing different distribute::Strategy objects: MirroredStrategy(CPU:0, CPU:1) is not "
        "MirroredStrategy(CPU:0, CPU:1, CPU:2)"}},
      {"E57",
       "FailedPreconditionError",
       {"Mixing different distribute::Strategy objects", "leave the other strategy's scope (or its run) first"}},
      {"E58",
       "FailedPreconditionError",
       {"run: Mixing different distribute::Strategy objects", "leave the other strategy's scope (or its run) first"}},
      {"E59",
       "FailedPreconditionError",
       {"ReplicaContext::all_reduce of replica 0 called from a thread that is not that replica's",
        "use get_replica_context() on the calling thread"}},
      {"E60",
       "FailedPreconditionError",
       {"of replica 0 called in cross-replica context", "call it inside the fn passed to Strategy::run"}},
      {"E61", "FailedPreconditionError", {"run nested 8 levels deep through merge_fn; at most 8 levels are supported"}},
      {"E62", "InvalidArgumentError", {"all_reduce: leaf 1 is an undefined Tensor (default-constructed)"}},
      {"E63", "InvalidArgumentError", {"all_gather: leaf 0 has rank 0 (a scalar)", "reshape it to shape (1,) first"}},
      {"E64",
       "InvalidArgumentError",
       {"all_gather: axis=2 is out of range for a value of rank 2; use an axis in [-2, 2)"}},
      {"E65",
       "InvalidArgumentError",
       {"all_reduce #1: replica 1 passed float32[10], replica 0 passed float32[12]",
        "all_reduce needs the same dtype and shape on every replica"}},
      {"E66", "InvalidArgumentError", {"all_reduce #1: replica 1 passed float64[4], replica 0 passed float32[4]"}},
      {"E67",
       "InvalidArgumentError",
       {"all_reduce #1: replica 1 passed list[float32, float32], replica 0 passed list[float32]",
        "the nest structure must be the same on every replica"}},
      {"E68",
       "InvalidArgumentError",
       {"all_reduce #1: replica 1 passed reduce op MEAN, replica 0 passed reduce op SUM"}},
      {"E69",
       "InvalidArgumentError",
       {"all_gather #1: replica 1 passed float32[2,3], replica 0 passed float32[2,2]",
        "all_gather needs the same dtype, rank and dimensions except axis 0"}},
      {"E70", "InvalidArgumentError", {"all_gather #1: replica 1 passed axis=1, replica 0 passed axis=0"}},
      {"E71",
       "InvalidArgumentError",
       {"all_reduce #1: replica 1 passed options {implementation=RING, bytes_per_pack=0}, replica 0 passed options "
        "{implementation=AUTO, bytes_per_pack=0}"}},
      {"E72",
       "FailedPreconditionError",
       {"replica 1 called all_gather where replica 0 called all_reduce (collective #1)",
        "Every replica must make the same collective calls in the same order"}},
      {"E73",
       "FailedPreconditionError",
       {"merge_call #1: replica 1 passed a merge_fn or arguments of other types than replica 0"}},
      {"E74",
       "FailedPreconditionError",
       {"replica 1 returned from the replica function while replicas 0, 2 wait in all_reduce (collective #1)"}},
      {"E75", "AbortedError", {"replica 0 raised: boom; the other replicas were released from their collectives"}},
      {"E76", "AbortedError", {"merge_fn of merge_call #1 raised: boom"}},
      {"E77",
       "DeadlineExceededError",
       {"timed out after 0.05 s: replica 1 did not arrive while replica 0 waits in all_reduce #1",
        "raise CommunicationOptions::timeout if it is slow"}},
      {"E78",
       "DeadlineExceededError",
       {"timed out after 0.05 s: replica 1 did not arrive while replica 0 waits in merge_call #1"}},
      {"E79", "OutOfRangeError", {"does not exist:", "logical GPU(s) are visible"}},
      {"E80", "InvalidArgumentError", {"MirroredStrategy: devices CPU:0 and GPU:0 mix CPUs and GPUs"}},
      {"E81", "InvalidArgumentError", {"CrossDeviceOps::kNcclAllReduce needs GPU devices and CPU:0 is a CPU"}},
      {"E82",
       "InvalidArgumentError",
       {"kNcclAllReduce cannot run GPU:0 and GPU:1: both are logical GPUs of physical GPU 0",
        "use kReductionToOneDevice or kAuto"}},
      {"E83", "UnimplementedError", {"kNcclAllReduce needs NCCL", "-DDISTRIBUTE_WITH_NCCL=ON"}},
      {"E84", "FailedPreconditionError", {"set_logical_device_configuration: GPUs are already in use"}},
      {"E85", "OutOfRangeError", {"set_logical_device_configuration: physical GPU", "does not exist"}},
      {"E86", "InvalidArgumentError", {"the list of logical devices for physical GPU 0 is empty"}},
      {"E87", "UnimplementedError", {"set_logical_device_configuration: this build of distribute has no GPU backend"}},
      {"E88", "InvalidArgumentError", {"is on CPU:0 but the replica runs on GPU:0", "move it with to()"}},
      {"E89", "InvalidArgumentError", {"Tensor::from_blob: null data for shape (2,)"}},
      {"E90", "ResourceExhaustedError", {"would exceed its memory_limit of 1048576 bytes"}},
      {"E91",
       "InvalidArgumentError",
       {"Tensor::view: the Eigen object's elements are not contiguous", "copy it into a Matrix or Array first"}},
      {"E92", "InvalidArgumentError", {"all_reduce_in_place: leaf 1 is a scalar", "pass Tensors"}},
      {"E93",
       "InvalidArgumentError",
       {"CommunicationOptions::implementation is NCCL but this strategy's collectives go through SharedMemoryAllReduce",
        "pass kAuto"}},
      {"E94",
       "InvalidArgumentError",
       {"MirroredStrategy: communication.implementation is RING but cross_device_ops is not kAuto"}},
      {"E95",
       "OutOfRangeError",
       {"Tensor::slice: rows [2, 5) are not within the 4 rows of shape (4, 3)", "use 0 <= begin <= end <= 4"}},
      {"E96",
       "InvalidArgumentError",
       {"Tensor::slice: the tensor has shape () (a scalar)", "slice() takes rows of dimension 0"}},
      {"E97", "InvalidArgumentError", {"Dataset::batch: batch_size is 0; it must be >= 1"}},
      {"E98", "InvalidArgumentError", {"Dataset::shard: index 2 is not in [0, 2) for num_shards 2"}},
      {"E99", "InvalidArgumentError", {"Dataset::take: count is -2; it must be >= 0, or -1 for every element"}},
      {"E100", "InvalidArgumentError", {"data::range: step is 0; it must not be 0"}},
      {"E101",
       "InvalidArgumentError",
       {"Dataset::from_tensor_slices: leaf 1 has 3 rows (shape (3, 2)) but leaf 0 has 4 (shape (4,))",
        "every leaf needs the same size in dimension 0"}},
      {"E102",
       "InvalidArgumentError",
       {"Dataset::from_tensor_slices: leaf 0 has shape () (a scalar); every leaf needs a dimension 0 to slice"}},
      {"E103",
       "InvalidArgumentError",
       {"Dataset::from_tensor_slices: tensors holds no Tensor (list[]); it needs at least one to slice"}},
      {"E104", "InvalidArgumentError", {"is an undefined Tensor (default-constructed)"}},
      {"E105",
       "InvalidArgumentError",
       {"Dataset::from_generator: make_next is empty", "make_next must return a new generator for each pass"}},
      {"E106",
       "InvalidArgumentError",
       {"Dataset::batch: element 1 of a batch has leaf 0 of float32 shape (3,) but element 0 has float32 shape (2,)",
        "every element of a batch needs the same dtype and shape in each leaf"}},
      {"E107",
       "InvalidArgumentError",
       {"Dataset::batch: element 1 of a batch has structure list[Tensor, Tensor] but element 0 has list[Tensor]",
        "every element of a batch needs the same structure"}},
      {"E108",
       "InvalidArgumentError",
       {"of a batch is on GPU:0", "batch() stacks host tensors, so batch before moving elements to a device"}},
      {"E109",
       "OutOfRangeError",
       {"End of sequence: the data has no more elements",
        "get_next_as_optional() or a range-for loop stops there instead"}},
      {"E110",
       "FailedPreconditionError",
       {"a distributed dataset cannot be iterated inside a replica's function",
        "iterate it in the caller's loop and pass each PerReplica batch to Strategy::run"}},
      {"E111", "InvalidArgumentError", {"InputOptions: experimental_per_replica_buffer_size is 0; it must be >= 1"}},
      {"E112",
       "InvalidArgumentError",
       {"DistributedDataset: worker_devices is empty; it needs one device per replica"}},
      {"E113",
       "InvalidArgumentError",
       {"experimental_distribute_dataset: leaf 0 of an element has shape () (a scalar); splitting it between 2 "
        "replicas needs a dimension 0: batch the dataset"}},
      {"E114",
       "InvalidArgumentError",
       {"experimental_distribute_dataset: leaf 1 of an element has 3 rows (shape (3,)) but leaf 0 has 2",
        "every leaf of a batch needs the same size in dimension 0"}},
      {"E115",
       "InvalidArgumentError",
       {"distribute_datasets_from_function: replica 1 has no element in the last step, and leaf 0 of the step's "
        "first element has shape () (a scalar)",
        "an empty batch needs a dimension 0"}},
      {"E116",
       "FailedPreconditionError",
       {"requires being in cross-replica context",
        "distribute the dataset outside Strategy::run and pass each step's PerReplica batch to run"}},
      {"E117",
       "InvalidArgumentError",
       {"Shape: (1099511627776, 1099511627776) has more elements than an int64 counts",
        "multiply to more than 9223372036854775807"}},
      {"E118",
       "InvalidArgumentError",
       {"4611686018427387904 elements of float32 (shape (4611686018427387904,)) take more bytes than a size_t counts"}},
      {"E119",
       "InvalidArgumentError",
       {"timeout is -1 s; it must be a finite number of seconds >= 0"}},
      {"E120",
       "FailedPreconditionError",
       {"StrategyScope: destroyed on a thread that did not enter it",
        "Destroy a scope on the thread that called Strategy::scope()"}},
      {"E121",
       "UnimplementedError",
       {"experimental_distribute_dataset: InputReplicationMode::kPerReplica is only supported by "
        "distribute_datasets_from_function"}},
      {"E122",
       "InvalidArgumentError",
       {"InputOptions: experimental_place_dataset_on_device places each replica's own input pipeline on its device",
        "it needs experimental_replication_mode = InputReplicationMode::kPerReplica"}},
      {"E123",
       "InvalidArgumentError",
       {"InputOptions: experimental_place_dataset_on_device and experimental_fetch_to_device are both set",
        "set experimental_fetch_to_device = false"}},
  };
  return rows;
}

const Row* find_row(std::string_view id) {
  for (const Row& row : expected_rows()) {
    if (row.id == id) return &row;
  }
  return nullptr;
}

// Runs fn under a watchdog and checks that it throws exactly E with row `id`'s key words and the
// `extra` ones (what a particular form of the situation adds, such as the method's name).
template <class E, class Fn>
std::string expect_row(std::string_view id, Fn&& fn, const std::vector<std::string>& extra = {}) {
  const Row* row = find_row(id);
  if (row == nullptr) {
    ADD_FAILURE() << id << " is not a row of expected_rows()";
    return "";
  }
  EXPECT_EQ(row->type, testing::type_name<E>()) << id << ": the test expects another type than the row lists";
  std::vector<std::string> words = row->key_words;
  words.insert(words.end(), extra.begin(), extra.end());
  Watchdog watchdog(kHangLimit, std::string(id));
  return expect_error<E>(fn, words);
}

Tensor zeros(Shape shape, DType dtype = DType::kFloat32) { return Tensor::zeros(dtype, std::move(shape)); }

// Each replica of a run gets zeros of its own shape / dtype: replica r gets shapes[r].
PerReplica<Tensor> per_replica_zeros(std::vector<Shape> shapes, std::vector<DType> dtypes = {}) {
  std::vector<Tensor> values;
  for (std::size_t r = 0; r < shapes.size(); ++r) {
    values.push_back(zeros(shapes[r], dtypes.empty() ? DType::kFloat32 : dtypes[r]));
  }
  return PerReplica<Tensor>(std::move(values));
}

int replica_id() { return get_replica_context()->replica_id_in_sync_group(); }

// ---------------------------------------------------------------------------------------------
// Devices and strategies.

TEST(Errors, E01_EmptyDeviceString) {
  expect_row<InvalidArgumentError>("E01", [] { Device::parse(""); });
}

TEST(Errors, E02_DeviceStringWithoutColon) {
  expect_row<InvalidArgumentError>("E02", [] { Device::parse("CPU"); });
}

TEST(Errors, E03_ShortNameWithSeveralParts) {
  expect_row<InvalidArgumentError>("E03", [] { Device::parse("CPU:0/GPU:1"); });
}

TEST(Errors, E04_UnknownDeviceType) {
  expect_row<InvalidArgumentError>("E04", [] { Device::parse("TPU:0"); });
}

TEST(Errors, E05_DeviceIndexNotAnInteger) {
  for (const std::string spec :
       {"CPU:-1", "CPU:x", "GPU:70000", "CPU:", "CPU:1.5", "/job:localhost/replica:x/task:0/device:CPU:0",
        "/job:localhost/task:-2/device:CPU:0"}) {
    SCOPED_TRACE(spec);
    expect_row<InvalidArgumentError>("E05", [&] { Device::parse(spec); }, {"\"" + spec + "\""});
  }
}

TEST(Errors, E06_DevicePartWithoutIndex) {
  expect_row<InvalidArgumentError>("E06", [] { Device::parse("/device:CPU"); });
}

TEST(Errors, E07_EmptyJobName) {
  expect_row<InvalidArgumentError>("E07", [] { Device::parse("/job:/device:CPU:0"); });
}

TEST(Errors, E08_FullNameWithoutDevice) {
  expect_row<InvalidArgumentError>("E08", [] { Device::parse("/job:localhost/replica:0/task:0"); },
                                   {"invalid device string \"/job:localhost/replica:0/task:0\""});
}

TEST(Errors, E09_FullNameWithTwoDevices) {
  expect_row<InvalidArgumentError>("E09", [] { Device::parse("/device:CPU:0/device:GPU:1"); });
}

TEST(Errors, E10_DeviceIndexOutOfRange) {
  expect_row<InvalidArgumentError>("E10", [] { Device::cpu(-1); });
  expect_row<InvalidArgumentError>("E10", [] { (void)Device(Device::Type::kGpu, -1); });
}

TEST(Errors, E11_StrategyWithInvalidDeviceString) {
  expect_row<InvalidArgumentError>("E11",
                                   [] {
                                     MirroredStrategy strategy({"CPU:0", "CPU-1"});
                                   },
                                   {"\"CPU-1\"", "has no ':'"});
  expect_row<InvalidArgumentError>("E11", [] { OneDeviceStrategy strategy("/device:XPU:0"); },
                                   {"unknown device type \"XPU\""});
}

TEST(Errors, E12_DuplicateDevices) {
  expect_row<InvalidArgumentError>(
      "E12",
      [] {
        MirroredStrategy strategy({"CPU:0", "/job:localhost/replica:0/task:0/device:CPU:0"});
      },
      {"MirroredStrategy: device \"/job:localhost/replica:0/task:0/device:CPU:0\""});
  expect_row<InvalidArgumentError>("E12",
                                   [] {
                                     MirroredStrategy strategy({"CPU:1", "CPU:0", "cpu:0"});
                                   },
                                   {"device \"cpu:0\""});
}

TEST(Errors, E13_GpuDeviceInCpuOnlyBuild) {
#if DISTRIBUTE_HAS_CUDA
  GTEST_SKIP() << "this build has a GPU backend";
#endif
  expect_row<UnimplementedError>("E13", [] { MirroredStrategy strategy({"GPU:0", "GPU:1"}); });
}

TEST(Errors, E14_OneDeviceStrategyOnGpuInCpuOnlyBuild) {
#if DISTRIBUTE_HAS_CUDA
  GTEST_SKIP() << "this build has a GPU backend";
#endif
  expect_row<UnimplementedError>("E14", [] { OneDeviceStrategy strategy("GPU:0"); });
}

TEST(Errors, E15_TensorOnGpuInCpuOnlyBuild) {
#if DISTRIBUTE_HAS_CUDA
  GTEST_SKIP() << "this build has a GPU backend";
#endif
  const Device gpu = Device::gpu(0);
  expect_row<UnimplementedError>("E15", [&] { Tensor::empty(DType::kFloat32, Shape{2}, gpu); });
  expect_row<UnimplementedError>("E15", [&] { Tensor::zeros(DType::kInt32, Shape{2, 2}, gpu); });
  expect_row<UnimplementedError>("E15", [&] { Tensor::from_vector<float>({1, 2}, Shape{2}, gpu); });
  expect_row<UnimplementedError>("E15", [&] { Tensor::scalar(1.0, gpu); });
  expect_row<UnimplementedError>("E15", [&] { Tensor::from_vector<float>({1, 2}).to(gpu); });
}

// ---------------------------------------------------------------------------------------------
// Shapes and tensors.

TEST(Errors, E16_ShapeWithNegativeDimension) {
  expect_row<InvalidArgumentError>("E16", [] { (void)Shape{2, -1}; });
  expect_row<InvalidArgumentError>("E16", [] { (void)Shape(std::vector<std::int64_t>{4, -1, 3}); });
}

TEST(Errors, E17_ShapeIndexOutOfRange) {
  const Shape shape{2, 3};
  expect_row<OutOfRangeError>("E17", [&] { (void)shape[2]; }, {"Shape(2, 3)[2]"});
  expect_row<OutOfRangeError>("E17", [&] { (void)shape[-3]; }, {"Shape(2, 3)[-3]"});
  EXPECT_EQ(shape[-1], 3);  // the limits themselves are valid
}

TEST(Errors, E18_FromVectorSizeMismatch) {
  expect_row<InvalidArgumentError>("E18", [] { Tensor::from_vector<float>({1, 2, 3, 4, 5}, Shape{2, 3}); });
}

TEST(Errors, E19_ItemOfTensorWithoutExactlyOneElement) {
  expect_row<InvalidArgumentError>("E19", [] { (void)Tensor::from_vector<float>({1, 2, 3}).item<float>(); });
  expect_error<InvalidArgumentError>([] { (void)Tensor::from_vector<float>({}).item<float>(); },
                                     {"Tensor::item: the tensor has shape (0,) (0 elements)"});
}

TEST(Errors, E20_ToVectorWithWrongType) {
  expect_row<InvalidArgumentError>("E20", [] { (void)Tensor::from_vector<float>({1, 2}).to_vector<std::int32_t>(); });
}

TEST(Errors, E21_HostViewWithWrongType) {
  const Tensor t = Tensor::from_vector<float>({1, 2});
  expect_row<InvalidArgumentError>("E21", [&] { (void)t.data<double>(); });
  expect_row<InvalidArgumentError>("E21", [&] { (void)t.flat<double>(); });
}

TEST(Errors, E22_MatrixOfTensorWhoseRankIsNotTwo) {
  expect_row<InvalidArgumentError>("E22", [] { (void)Tensor::from_vector<float>({1, 2, 3}).matrix<float>(); });
}

TEST(Errors, E23_ReshapeToOtherElementCount) {
  expect_row<InvalidArgumentError>("E23", [] { (void)zeros(Shape{2, 3}).reshape(Shape{4}); });
}

TEST(Errors, E24_UndefinedTensor) {
  const Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.to_vector<float>(); }, {"Tensor::to_vector"});
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.item<float>(); }, {"Tensor::item"});
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.device(); }, {"Tensor::device"});
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.clone(); });
  expect_row<FailedPreconditionError>("E24", [&] { (void)undefined.reshape(Shape{}); }, {"Tensor::reshape"});
}

// ---------------------------------------------------------------------------------------------
// Distributed values and the value / input contexts.

TEST(Errors, E25_EmptyDistributedValues) {
  expect_row<InvalidArgumentError>("E25", [] { PerReplica<Tensor> values(std::vector<Tensor>{}); });
  expect_row<InvalidArgumentError>("E25", [] { Mirrored<float> values(1.0f, 0); });
}

TEST(Errors, E26_DistributedValuesIndexOutOfRange) {
  const PerReplica<int> values({7, 8});
  expect_row<OutOfRangeError>("E26", [&] { (void)values[2]; });
  expect_error<OutOfRangeError>([&] { (void)values[-1]; }, {"replica -1 does not exist"});
}

TEST(Errors, E27_ValueContextWithoutReplicas) {
  expect_row<InvalidArgumentError>("E27", [] { ValueContext context(0, 0); });
}

TEST(Errors, E28_ValueContextReplicaIdOutOfRange) {
  expect_row<InvalidArgumentError>("E28", [] { ValueContext context(2, 2); });
  expect_error<InvalidArgumentError>([] { ValueContext context(-1, 2); },
                                     {"ValueContext: replica_id_in_sync_group -1 is not in [0, 2)"});
}

TEST(Errors, E29_InputContextWithoutPipelines) {
  expect_row<InvalidArgumentError>("E29", [] { InputContext context(0, 0, 1); });
}

TEST(Errors, E30_InputContextPipelineIdOutOfRange) {
  expect_row<InvalidArgumentError>("E30", [] { InputContext context(2, 2, 1); });
}

TEST(Errors, E31_InputContextWithoutReplicas) {
  expect_row<InvalidArgumentError>("E31", [] { InputContext context(1, 0, 0); });
}

TEST(Errors, E32_BatchSizeNotDivisible) {
  const InputContext context(1, 0, 4);
  expect_row<InvalidArgumentError>("E32", [&] { (void)context.get_per_replica_batch_size(10); });
  EXPECT_EQ(context.get_per_replica_batch_size(12), 3);
}

TEST(Errors, E33_NegativeBatchSize) {
  expect_row<InvalidArgumentError>("E33", [] { (void)InputContext(1, 0, 4).get_per_replica_batch_size(-8); });
}

// ---------------------------------------------------------------------------------------------
// Reduce ops and the cross-replica reduce / gather.

TEST(Errors, E34_UnknownReduceOpName) {
  expect_row<InvalidArgumentError>("E34", [] { parse_reduce_op("max"); }, {"\"max\""});
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E34",
                                   [&] {
                                     (void)strategy.reduce("Max", PerReplica<float>({1.0f, 2.0f}), std::nullopt);
                                   },
                                   {"\"Max\""});
  expect_row<InvalidArgumentError>(
      "E34", [&] { strategy.run([] { get_replica_context()->all_reduce("prod", 1.0f); }); }, {"\"prod\""});
}

TEST(Errors, E35_ReduceAxisOutOfRange) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E35", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2, 3}, Shape{2, 3}}), 2);
  });
}

TEST(Errors, E36_ReduceAxisOfScalars) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E36", [&] {
    (void)strategy.reduce(ReduceOp::kSum, PerReplica<float>({1.0f, 2.0f}), 0);
  });
}

TEST(Errors, E37_GatherAxisOutOfRange) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E37", [&] { strategy.gather(per_replica_zeros({Shape{2, 2}, Shape{2, 2}}), -3); });
}

TEST(Errors, E38_GatherOfScalars) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E38", [&] { strategy.gather(per_replica_zeros({Shape{}, Shape{}}), 0); });
}

TEST(Errors, E39_ReduceDTypeMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E39", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2}, Shape{2}}, {DType::kFloat32, DType::kInt32}),
                    std::nullopt);
  });
}

TEST(Errors, E40_ReduceRankMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E40", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2}, Shape{2, 1}}), std::nullopt);
  });
}

TEST(Errors, E41_ReduceShapeMismatchWithoutAxis) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E41", [&] {
    strategy.reduce(ReduceOp::kMean, per_replica_zeros({Shape{2}, Shape{3}}), std::nullopt);
  });
  // Along an axis the same values are fine: the sizes may differ there.
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2}, Shape{3}}), 0).shape(), Shape{});
}

TEST(Errors, E42_ReduceShapeMismatchOutsideAxis) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E42", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2, 2}, Shape{3, 3}}), 0);
  });
}

TEST(Errors, E43_GatherDTypeMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E43", [&] {
    strategy.gather(per_replica_zeros({Shape{2, 2}, Shape{2, 2}}, {DType::kFloat32, DType::kFloat64}), 0);
  });
}

TEST(Errors, E44_GatherShapeMismatchOutsideAxis) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E44", [&] { strategy.gather(per_replica_zeros({Shape{2, 2}, Shape{2, 3}}), 0); });
}

TEST(Errors, E45_UndefinedComponent) {
  MirroredStrategy strategy(cpu_devices(2));
  const PerReplica<Tensor> values({zeros(Shape{2}), Tensor()});
  expect_row<InvalidArgumentError>("E45", [&] { strategy.reduce(ReduceOp::kSum, values, std::nullopt); },
                                   {"Strategy::reduce"});
  expect_row<InvalidArgumentError>("E45", [&] { strategy.gather(values, 0); }, {"Strategy::gather"});
}

TEST(Errors, E46_NonDistributedSumOnSeveralReplicas) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E46", [&] { strategy.reduce(ReduceOp::kSum, Tensor::scalar(1.0f), std::nullopt); });
  expect_row<InvalidArgumentError>("E46", [&] { (void)strategy.reduce(ReduceOp::kSum, 1.0f, std::nullopt); });
  // MEAN of a value that is the same everywhere is the value.
  EXPECT_EQ(strategy.reduce(ReduceOp::kMean, 3.0f, std::nullopt), 3.0f);
}

TEST(Errors, E47_ReduceOfValuesForAnotherReplicaCount) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E47", [&] {
    strategy.reduce(ReduceOp::kSum, per_replica_zeros({Shape{2}, Shape{2}, Shape{2}}), std::nullopt);
  });
}

TEST(Errors, E48_GatherOfValuesForAnotherReplicaCount) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E48", [&] {
    strategy.gather(per_replica_zeros({Shape{2}, Shape{2}, Shape{2}}), 0);
  });
}

TEST(Errors, E49_RunArgumentForAnotherReplicaCount) {
  MirroredStrategy strategy(cpu_devices(2));
  std::atomic<int> calls{0};
  expect_row<InvalidArgumentError>("E49", [&] {
    strategy.run([&](float, const Tensor&) { ++calls; }, 1.0f, per_replica_zeros({Shape{2}, Shape{2}, Shape{2}}));
  });
  EXPECT_EQ(calls.load(), 0);  // checked before any replica starts
}

TEST(Errors, E50_UpdateOfValueWithOtherComponentCount) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E50", [&] {
    strategy.extended().update(Mirrored<Tensor>(Tensor::scalar(1.0f), 3), [](const Tensor& t) { return t; });
  });
}

// ---------------------------------------------------------------------------------------------
// Contexts: replica vs cross-replica, mixed strategies, threads.

TEST(Errors, E51_RunInsideRun) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E51", [&] { strategy.run([&] { strategy.run([] {}); }); });
}

TEST(Errors, E52_ReduceInsideReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>(
      "E52", [&] { strategy.run([&] { (void)strategy.reduce(ReduceOp::kSum, 1.0f, std::nullopt); }); });
}

TEST(Errors, E53_GatherInsideReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E53", [&] {
    strategy.run([&] { strategy.gather(per_replica_zeros({Shape{1}, Shape{1}}), 0); });
  });
}

TEST(Errors, E54_ExtendedOperationsInsideReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyExtended& extended = strategy.extended();
  const PerReplica<Tensor> values = per_replica_zeros({Shape{1}, Shape{1}});
  expect_row<FailedPreconditionError>(
      "E54", [&] { strategy.run([&] { extended.reduce_to(ReduceOp::kSum, values, Device::cpu()); }); },
      {"extended().reduce_to"});
  expect_row<FailedPreconditionError>(
      "E54", [&] { strategy.run([&] {
                     extended.batch_reduce_to(ReduceOp::kSum, {{values, Device::cpu()}});
                   }); },
      {"extended().batch_reduce_to"});
  expect_row<FailedPreconditionError>(
      "E54", [&] { strategy.run([&] { extended.gather_to(values, Device::cpu(), 0); }); }, {"extended().gather_to"});
  expect_row<FailedPreconditionError>(
      "E54",
      [&] {
        strategy.run(
            [&] { extended.update(Mirrored<Tensor>(Tensor::scalar(1.0f), 2), [](const Tensor& t) { return t; }); });
      },
      {"extended().update"});
  expect_row<FailedPreconditionError>(
      "E54", [&] { strategy.run([&] { extended.call_for_each_replica([](ReplicaContext&) {}); }); },
      {"extended().call_for_each_replica"});
}

TEST(Errors, E55_ScopeInsideReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E55", [&] { strategy.run([&] { auto scope = strategy.scope(); }); });
}

TEST(Errors, E56_ScopesOfTwoStrategiesMixed) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(3));
  auto scope = a.scope();
  expect_row<FailedPreconditionError>("E56", [&] { auto inner = b.scope(); });
  EXPECT_EQ(get_cross_replica_context(), &a);  // the failed scope left the context as it was
}

TEST(Errors, E57_OtherStrategyInsideScope) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(3));
  auto scope = a.scope();
  expect_row<FailedPreconditionError>("E57", [&] { b.run([] {}); }, {"run: "});
  expect_row<FailedPreconditionError>(
      "E57",
      [&] {
        (void)b.reduce(ReduceOp::kMean, PerReplica<float>({1.0f, 2.0f, 3.0f}), std::nullopt);
      },
      {"reduce: "});
  expect_row<FailedPreconditionError>("E57",
                                      [&] {
                                        b.gather(per_replica_zeros({Shape{1}, Shape{1}, Shape{1}}), 0);
                                      },
                                      {"Strategy::gather: "});
}

TEST(Errors, E58_OtherStrategyRunInsideReplica) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(3));
  expect_row<FailedPreconditionError>("E58", [&] { a.run([&] { b.run([] {}); }); });
}

TEST(Errors, E59_ReplicaContextFromAnotherThread) {
  MirroredStrategy strategy(cpu_devices(2));
  std::vector<ReplicaContext*> contexts(2);
  strategy.run([&] { contexts[static_cast<std::size_t>(replica_id())] = get_replica_context(); });
  // Kept after run and used on the caller's thread.
  expect_row<FailedPreconditionError>("E59", [&] { contexts[0]->all_reduce(ReduceOp::kSum, 1.0f); });
  // Handed to another replica, which uses it instead of its own.
  expect_row<FailedPreconditionError>("E59",
                                      [&] {
                                        strategy.run([&] {
                                          if (replica_id() == 1) contexts[0]->all_reduce(ReduceOp::kSum, 1.0f);
                                        });
                                      },
                                      {"(this thread is in the context of replica 1)"});
}

TEST(Errors, E60_CollectiveInCrossReplicaContext) {
  MirroredStrategy strategy(cpu_devices(2));
  // Inside merge_fn, with the context the replica captured.
  expect_row<FailedPreconditionError>(
      "E60",
      [&] {
        strategy.run([] {
          ReplicaContext* context = get_replica_context();
          // merge_fn runs once, with replica 0's closure.
          context->merge_call([context](Strategy&) { context->all_reduce(ReduceOp::kSum, 1.0f); });
        });
      },
      {"ReplicaContext::all_reduce"});
  // Inside a scope, with a context kept from an earlier run.
  ReplicaContext* first = nullptr;
  strategy.run([&] {
    if (replica_id() == 0) first = get_replica_context();
  });
  auto scope = strategy.scope();
  expect_row<FailedPreconditionError>("E60", [&] { first->merge_call([](Strategy&) {}); },
                                      {"ReplicaContext::merge_call"});
  expect_row<FailedPreconditionError>("E60", [&] { first->all_gather(zeros(Shape{1}), 0); },
                                      {"ReplicaContext::all_gather"});
}

// Runs on `strategy` with a merge_fn that runs again, without end: the depth limit stops it.
void run_nested_through_merge_fn(Strategy& strategy) {
  strategy.run([] { get_replica_context()->merge_call([](Strategy& s) { run_nested_through_merge_fn(s); }); });
}

TEST(Errors, E61_RunNestedTooDeep) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E61", [&] { run_nested_through_merge_fn(strategy); });
}

// ---------------------------------------------------------------------------------------------
// Collectives: bad values on one replica, and replicas that disagree (see also misuse_test.cc).

TEST(Errors, E62_AllReduceOfUndefinedTensor) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E62", [&] {
    strategy.run([] {
      get_replica_context()->all_reduce(ReduceOp::kSum, std::vector<Tensor>{zeros(Shape{1}), Tensor()});
    });
  });
}

TEST(Errors, E63_AllGatherOfScalar) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>(
      "E63", [&] { strategy.run([] { get_replica_context()->all_gather(Tensor::scalar(1.0f), 0); }); });
  expect_row<InvalidArgumentError>("E63", [&] { strategy.run([] { get_replica_context()->all_gather(1.0f, 0); }); });
}

TEST(Errors, E64_AllGatherAxisOutOfRange) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E64", [&] {
    strategy.run([] { get_replica_context()->all_gather(zeros(Shape{2, 2}), 2); });
  });
}

TEST(Errors, E65_AllReduceShapeMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E65", [&] {
    strategy.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, zeros(Shape{replica_id() == 1 ? 10 : 12})); });
  });
}

TEST(Errors, E66_AllReduceDTypeMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E66", [&] {
    strategy.run([] {
      get_replica_context()->all_reduce(ReduceOp::kSum,
                                        zeros(Shape{4}, replica_id() == 1 ? DType::kFloat64 : DType::kFloat32));
    });
  });
}

TEST(Errors, E67_NestStructureMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E67", [&] {
    strategy.run([] {
      get_replica_context()->all_reduce(ReduceOp::kSum,
                                        std::vector<float>(static_cast<std::size_t>(replica_id() + 1), 1.0f));
    });
  });
}

TEST(Errors, E68_ReduceOpMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E68", [&] {
    strategy.run([] { get_replica_context()->all_reduce(replica_id() == 1 ? ReduceOp::kMean : ReduceOp::kSum, 1.0f); });
  });
}

TEST(Errors, E69_AllGatherShapeMismatchOutsideAxis) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E69", [&] {
    strategy.run([] { get_replica_context()->all_gather(zeros(Shape{2, replica_id() == 1 ? 3 : 2}), 0); });
  });
}

TEST(Errors, E70_AllGatherAxisMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E70", [&] {
    strategy.run([] { get_replica_context()->all_gather(zeros(Shape{2, 2}), replica_id() == 1 ? 1 : 0); });
  });
}

TEST(Errors, E71_CommunicationOptionsMismatch) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E71", [&] {
    strategy.run([] {
      CommunicationOptions options;
      if (replica_id() == 1) options.implementation = CommunicationImplementation::kRing;
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, options);
    });
  });
}

TEST(Errors, E72_DifferentCollectives) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E72", [&] {
    strategy.run([] {
      if (replica_id() == 1) {
        get_replica_context()->all_gather(zeros(Shape{2}), 0);
      } else {
        get_replica_context()->all_reduce(ReduceOp::kSum, zeros(Shape{2}));
      }
    });
  });
}

TEST(Errors, E73_MergeCallWithDifferentMergeFns) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<FailedPreconditionError>("E73", [&] {
    strategy.run([] {
      if (replica_id() == 1) {
        get_replica_context()->merge_call([](Strategy&) {});
      } else {
        get_replica_context()->merge_call([](Strategy&) {});
      }
    });
  });
}

TEST(Errors, E74_ReplicaReturnsWhileOthersWait) {
  MirroredStrategy strategy(cpu_devices(3));
  expect_row<FailedPreconditionError>("E74", [&] {
    strategy.run([] {
      if (replica_id() == 1) return;
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
    });
  });
}

TEST(Errors, E75_ReplicaRaisesWhileOthersWait) {
  MirroredStrategy strategy(cpu_devices(2));
  std::exception_ptr seen_by_replica_1;
  expect_error<std::runtime_error>(
      [&] {
        strategy.run([&] {
          if (replica_id() == 0) throw std::runtime_error("boom");
          try {
            get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
          } catch (...) {
            seen_by_replica_1 = std::current_exception();
            throw;
          }
        });
      },
      {"boom"});
  ASSERT_TRUE(seen_by_replica_1);
  expect_row<AbortedError>("E75", [&] { std::rethrow_exception(seen_by_replica_1); });
}

TEST(Errors, E76_MergeFnRaises) {
  MirroredStrategy strategy(cpu_devices(2));
  std::vector<std::exception_ptr> seen(2);
  expect_error<std::runtime_error>(
      [&] {
        strategy.run([&] {
          try {
            get_replica_context()->merge_call([](Strategy&) { throw std::runtime_error("boom"); });
          } catch (...) {
            seen[static_cast<std::size_t>(replica_id())] = std::current_exception();
            throw;
          }
        });
      },
      {"boom"});
  for (const std::exception_ptr& error : seen) {
    ASSERT_TRUE(error);
    expect_row<AbortedError>("E76", [&] { std::rethrow_exception(error); });
  }
}

TEST(Errors, E77_CollectiveTimeout) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<DeadlineExceededError>("E77", [&] {
    strategy.run([] {
      if (replica_id() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      CommunicationOptions options;
      options.timeout = std::chrono::milliseconds(50);
      get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, options);
    });
  });
}

TEST(Errors, E78_StrategyWideTimeout) {
  MirroredStrategy strategy(cpu_devices(2),
                            MirroredStrategyOptions{.communication = {.timeout = std::chrono::milliseconds(50)}});
  bool merge_fn_ran = false;
  expect_row<DeadlineExceededError>("E78", [&] {
    strategy.run([&] {
      if (replica_id() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      get_replica_context()->merge_call([&](Strategy&) { merge_fn_ran = true; });
    });
  });
  EXPECT_FALSE(merge_fn_ran);
}

// ---------------------------------------------------------------------------------------------
// GPUs. Rows that need a GPU (or a build without CUDA or NCCL) skip elsewhere with the reason.

#define SKIP_UNLESS_GPU()                                                                      \
  if (num_physical_gpus() == 0) GTEST_SKIP() << "no GPU visible: " << gpu_unavailable_reason()

TEST(Errors, E79_GpuThatDoesNotExist) {
  if (!DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has no GPU backend (row E13 applies)";
  const std::string missing = "GPU:" + std::to_string(list_logical_gpus().size());
  expect_row<OutOfRangeError>("E79", [&] { MirroredStrategy strategy({missing}); });
  expect_row<OutOfRangeError>("E79", [&] { OneDeviceStrategy strategy(missing); });
  expect_row<OutOfRangeError>("E79", [&] { Tensor::empty(DType::kFloat32, Shape{2}, Device::parse(missing)); });
}

TEST(Errors, E80_MirroredStrategyMixesCpusAndGpus) {
  if (!DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has no GPU backend (row E13 applies)";
  expect_row<InvalidArgumentError>("E80", [] { MirroredStrategy strategy({"CPU:0", "GPU:0"}); });
}

TEST(Errors, E81_NcclOnCpuDevices) {
  MirroredStrategyOptions options;
  options.cross_device_ops = CrossDeviceOps::kNcclAllReduce;
  expect_row<InvalidArgumentError>("E81", [&] { MirroredStrategy strategy(cpu_devices(2), options); });
}

TEST(Errors, E82_NcclOverLogicalGpusOfOnePhysicalGpu) {
  SKIP_UNLESS_GPU();
  if (!DISTRIBUTE_HAS_NCCL) GTEST_SKIP() << "this build has no NCCL (row E83 applies)";
  set_logical_device_configuration(0, {{}, {}});
  MirroredStrategyOptions options;
  options.cross_device_ops = CrossDeviceOps::kNcclAllReduce;
  expect_row<InvalidArgumentError>("E82", [&] { MirroredStrategy strategy({"GPU:0", "GPU:1"}, options); });
}

TEST(Errors, E83_NcclInABuildWithoutIt) {
  SKIP_UNLESS_GPU();
  if (DISTRIBUTE_HAS_NCCL) GTEST_SKIP() << "this build has NCCL";
  MirroredStrategyOptions options;
  options.cross_device_ops = CrossDeviceOps::kNcclAllReduce;
  expect_row<UnimplementedError>("E83", [&] { MirroredStrategy strategy({"GPU:0"}, options); });
}

TEST(Errors, E84_LogicalConfigurationAfterFirstUse) {
  SKIP_UNLESS_GPU();
  (void)Tensor::empty(DType::kFloat32, Shape{1}, Device::gpu(0));
  expect_row<FailedPreconditionError>("E84", [] { set_logical_device_configuration(0, {{}, {}}); });
}

TEST(Errors, E85_LogicalConfigurationOfAMissingPhysicalGpu) {
  if (!DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has no GPU backend (row E87 applies)";
  expect_row<OutOfRangeError>("E85", [] { set_logical_device_configuration(num_physical_gpus(), {{}}); });
}

TEST(Errors, E86_LogicalConfigurationWithAnEmptyList) {
  SKIP_UNLESS_GPU();
  expect_row<InvalidArgumentError>("E86", [] { set_logical_device_configuration(0, {}); });
}

TEST(Errors, E87_LogicalConfigurationWithoutCuda) {
  if (DISTRIBUTE_HAS_CUDA) GTEST_SKIP() << "this build has a GPU backend";
  expect_row<UnimplementedError>("E87", [] { set_logical_device_configuration(0, {{}, {}}); });
}

TEST(Errors, E88_CollectiveOnATensorOfAnotherDevice) {
  SKIP_UNLESS_GPU();
  Tensor host = Tensor::from_vector<float>({1, 2});
  MirroredStrategy strategy({"GPU:0"});
  expect_row<InvalidArgumentError>("E88", [&] {
    strategy.run([&] { return get_replica_context()->all_reduce(ReduceOp::kSum, host); });
  });
}

TEST(Errors, E89_FromBlobWithNullData) {
  expect_row<InvalidArgumentError>("E89", [] { Tensor::from_blob(nullptr, DType::kFloat32, Shape{2}, Device::cpu()); });
}

TEST(Errors, E91_ViewOfAStridedEigenMap) {
  std::vector<float> memory(16);
  Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>> corner(memory.data(), 2, 2, Eigen::OuterStride<>(4));
  expect_row<InvalidArgumentError>("E91", [&] { (void)Tensor::view(corner); });
}

TEST(Errors, E92_InPlaceAllReduceOfAScalar) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>("E92", [&] {
    strategy.run([] {
      std::tuple<Tensor, double> value{Tensor::scalar(1.0f), 2.0};
      get_replica_context()->all_reduce_in_place(ReduceOp::kSum, value);
    });
  });
}

TEST(Errors, E93_ImplementationThatIsNotTheStrategys) {
  MirroredStrategy strategy(cpu_devices(2));
  CommunicationOptions nccl;
  nccl.implementation = CommunicationImplementation::kNccl;
  expect_row<InvalidArgumentError>(
      "E93", [&] { strategy.run([&] { (void)get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, nccl); }); },
      {"all_reduce #1: "});
  const PerReplica<Tensor> values{Tensor::scalar(1.0f), Tensor::scalar(2.0f)};
  expect_row<InvalidArgumentError>(
      "E93", [&] { (void)strategy.extended().reduce_to(ReduceOp::kSum, values, Device::cpu(), nccl); },
      {"extended().reduce_to: "});
  // The strategy stays usable, and RING is the shared-memory backend's own.
  CommunicationOptions ring;
  ring.implementation = CommunicationImplementation::kRing;
  auto sums = strategy.run([&] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, ring); });
  EXPECT_EQ(sums[1], 2.0f);
}

TEST(Errors, E94_ImplementationThatContradictsCrossDeviceOps) {
  MirroredStrategyOptions options;
  options.communication.implementation = CommunicationImplementation::kRing;
  options.cross_device_ops = CrossDeviceOps::kReductionToOneDevice;
  expect_row<InvalidArgumentError>("E94", [&] { MirroredStrategy strategy(cpu_devices(2), options); });
}

TEST(Errors, E90_LogicalGpuMemoryLimit) {
  SKIP_UNLESS_GPU();
  set_logical_device_configuration(0, {{.memory_limit = 1 << 20}});
  expect_row<ResourceExhaustedError>("E90", [] { Tensor::empty(DType::kFloat32, Shape{1 << 19}, Device::gpu(0)); });
}

// ---------------------------------------------------------------------------------------------
// Datasets and distributed input.

// A generator dataset yielding `elements`, then the end.
template <class T>
data::Dataset<T> dataset_of(std::vector<T> elements) {
  return data::Dataset<T>::from_generator([elements] {
    return std::function<std::optional<T>()>([elements, i = std::size_t{0}]() mutable -> std::optional<T> {
      if (i == elements.size()) return std::nullopt;
      return elements[i++];
    });
  });
}

data::Dataset<Tensor> five_to_eight() {
  return data::Dataset<Tensor>::from_tensor_slices(Tensor::from_vector<float>({5, 6, 7, 8}));
}

TEST(Errors, E95_SliceOutsideTheRows) {
  const Tensor t = zeros(Shape{4, 3});
  expect_row<OutOfRangeError>("E95", [&] { (void)t.slice(2, 5); });
}

TEST(Errors, E96_SliceOfAScalar) {
  expect_row<InvalidArgumentError>("E96", [] { (void)Tensor::scalar(1.0f).slice(0, 0); });
}

TEST(Errors, E97_DatasetSizeBelowOne) {
  expect_row<InvalidArgumentError>("E97", [] { (void)data::range(4).batch(0); });
}

TEST(Errors, E98_ShardIndexOutOfRange) {
  expect_row<InvalidArgumentError>("E98", [] { (void)data::range(4).shard(2, 2); });
}

TEST(Errors, E99_CountBelowMinusOne) {
  expect_row<InvalidArgumentError>("E99", [] { (void)data::range(4).take(-2); });
}

TEST(Errors, E100_RangeWithStepZero) {
  expect_row<InvalidArgumentError>("E100", [] { (void)data::range(0, 4, 0); });
}

TEST(Errors, E101_SlicesOfLeavesWithOtherRows) {
  using Pair = std::pair<Tensor, Tensor>;
  expect_row<InvalidArgumentError>("E101", [] {
    (void)data::Dataset<Pair>::from_tensor_slices({zeros(Shape{4}), zeros(Shape{3, 2})});
  });
}

TEST(Errors, E102_SlicesOfAScalar) {
  expect_row<InvalidArgumentError>("E102",
                                   [] { (void)data::Dataset<Tensor>::from_tensor_slices(Tensor::scalar(1.0f)); });
}

TEST(Errors, E103_SlicesOfNoTensor) {
  expect_row<InvalidArgumentError>("E103", [] { (void)data::Dataset<std::vector<Tensor>>::from_tensor_slices({}); });
}

TEST(Errors, E104_UndefinedLeafInADataset) {
  using Pair = std::pair<Tensor, Tensor>;
  expect_row<InvalidArgumentError>("E104",
                                   [] {
                                     (void)data::Dataset<Pair>::from_tensor_slices({zeros(Shape{1}), Tensor()});
                                   },
                                   {"Dataset::from_tensor_slices: leaf 1"});
  expect_row<InvalidArgumentError>(
      "E104",
      [] {
        (void)dataset_of<Tensor>({zeros(Shape{}), Tensor()}).batch(2).make_iterator().get_next();
      },
      {"Dataset::batch: leaf 0 of element 1 of a batch"});
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>(
      "E104",
      [&] {
        (void)strategy.experimental_distribute_dataset(dataset_of<Pair>({{zeros(Shape{2}), Tensor()}}))
            .make_iterator()
            .get_next();
      },
      {"experimental_distribute_dataset: leaf 1 of an element"});
}

TEST(Errors, E105_EmptyGenerator) {
  expect_row<InvalidArgumentError>("E105", [] { (void)data::Dataset<Tensor>::from_generator(nullptr); });
}

TEST(Errors, E106_BatchOfOtherShapes) {
  auto it = dataset_of<Tensor>({zeros(Shape{2}), zeros(Shape{3})}).batch(2).make_iterator();
  expect_row<InvalidArgumentError>("E106", [&] { (void)it.get_next(); });
}

TEST(Errors, E107_BatchOfOtherStructures) {
  using List = std::vector<Tensor>;
  auto it = dataset_of<List>({List{zeros(Shape{})}, List{zeros(Shape{}), zeros(Shape{})}}).batch(2).make_iterator();
  expect_row<InvalidArgumentError>("E107", [&] { (void)it.get_next(); });
}

TEST(Errors, E108_BatchOfGpuTensors) {
  SKIP_UNLESS_GPU();
  auto it = dataset_of<Tensor>({Tensor::zeros(DType::kFloat32, Shape{2}, Device::gpu(0))}).batch(2).make_iterator();
  expect_row<InvalidArgumentError>("E108", [&] { (void)it.get_next(); });
}

TEST(Errors, E109_GetNextAtTheEnd) {
  auto it = five_to_eight().take(0).make_iterator();
  expect_row<OutOfRangeError>("E109", [&] { (void)it.get_next(); }, {"data::Iterator::get_next"});
  MirroredStrategy strategy(cpu_devices(2));
  auto distributed = strategy.experimental_distribute_dataset(five_to_eight().batch(4)).make_iterator();
  (void)distributed.get_next();
  expect_row<OutOfRangeError>("E109", [&] { (void)distributed.get_next(); }, {"DistributedIterator::get_next"});
}

TEST(Errors, E110_IteratingInsideAReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  const auto ds = strategy.experimental_distribute_dataset(five_to_eight().batch(2));
  auto it = ds.make_iterator();
  strategy.run([&] {
    expect_row<FailedPreconditionError>("E110", [&] { (void)it.get_next(); }, {"DistributedIterator::get_next"});
    expect_row<FailedPreconditionError>("E110", [&] { (void)ds.begin(); }, {"DistributedDataset::make_iterator"});
  });
}

TEST(Errors, E111_InputBufferBelowOne) {
  MirroredStrategy strategy(cpu_devices(2));
  InputOptions options;
  options.experimental_per_replica_buffer_size = 0;
  expect_row<InvalidArgumentError>("E111",
                                   [&] { (void)strategy.experimental_distribute_dataset(five_to_eight(), options); });
}

TEST(Errors, E112_NoWorkerDevices) {
  expect_row<InvalidArgumentError>("E112", [] { (void)DistributedDataset<Tensor>::from_dataset({}, five_to_eight()); });
}

TEST(Errors, E113_SplittingScalars) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>(
      "E113", [&] { (void)strategy.experimental_distribute_dataset(five_to_eight()).make_iterator().get_next(); });
}

TEST(Errors, E114_SplittingLeavesWithOtherRows) {
  using Pair = std::pair<Tensor, Tensor>;
  MirroredStrategy strategy(cpu_devices(2));
  const auto uneven = dataset_of<Pair>({{zeros(Shape{2}), zeros(Shape{3})}});
  expect_row<InvalidArgumentError>(
      "E114", [&] { (void)strategy.experimental_distribute_dataset(uneven).make_iterator().get_next(); });
}

TEST(Errors, E115_NoEmptyBatchForAScalar) {
  MirroredStrategy strategy(cpu_devices(2));
  auto it =
      strategy.distribute_datasets_from_function([](const InputContext&) { return data::range(3); }).make_iterator();
  (void)it.get_next();
  expect_row<InvalidArgumentError>("E115", [&] { (void)it.get_next(); });
}

TEST(Errors, E116_DistributingInsideAReplica) {
  MirroredStrategy strategy(cpu_devices(2));
  strategy.run([&] {
    expect_row<FailedPreconditionError>(
        "E116", [&] { (void)strategy.experimental_distribute_dataset(five_to_eight().batch(2)); },
        {"experimental_distribute_dataset"});
    expect_row<FailedPreconditionError>(
        "E116",
        [&] { (void)strategy.distribute_datasets_from_function([](const InputContext&) { return five_to_eight(); }); },
        {"distribute_datasets_from_function"});
  });
}

TEST(Errors, E117_ShapeWithTooManyElements) {
  constexpr std::int64_t k2_40 = std::int64_t{1} << 40;
  expect_row<InvalidArgumentError>("E117", [] { (void)Shape{k2_40, k2_40}; });
  expect_row<InvalidArgumentError>("E117", [] { (void)Shape{k2_40, 1}.with_dim(1, k2_40); });
}

TEST(Errors, E118_TensorWithTooManyBytes) {
  const Shape huge{std::int64_t{1} << 62};
  expect_row<InvalidArgumentError>("E118", [&] { (void)Tensor::zeros(DType::kFloat32, huge); }, {"Tensor::empty"});
  float x = 0;
  expect_row<InvalidArgumentError>("E118", [&] { (void)Tensor::from_blob(&x, huge); }, {"Tensor::from_blob"});
}

TEST(Errors, E119_TimeoutThatIsNegativeOrNotFinite) {
  const CommunicationOptions bad{.timeout = std::chrono::duration<double>(-1)};
  expect_row<InvalidArgumentError>(
      "E119", [&] { MirroredStrategy strategy(cpu_devices(2), MirroredStrategyOptions{.communication = bad}); },
      {"MirroredStrategy: options.communication.timeout"});
  MirroredStrategy strategy(cpu_devices(2));
  expect_row<InvalidArgumentError>(
      "E119", [&] { strategy.run([&] { get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f, bad); }); },
      {"CommunicationOptions::timeout"});
}

TEST(Errors, E120_ScopeDestroyedOnAnotherThread) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope* scope = nullptr;
  std::thread([&] { scope = new StrategyScope(strategy.scope()); }).join();
  expect_row<FailedPreconditionError>("E120", [&] { delete scope; });
}

TEST(Errors, E121_PerReplicaInputOfOneDataset) {
  MirroredStrategy strategy(cpu_devices(2));
  InputOptions options;
  options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  expect_row<UnimplementedError>(
      "E121", [&] { (void)strategy.experimental_distribute_dataset(five_to_eight().batch(2), options); });
}

TEST(Errors, E122_PlaceDatasetOnDeviceOfOnePipeline) {
  MirroredStrategy strategy(cpu_devices(2));
  InputOptions options;
  options.experimental_fetch_to_device = false;
  options.experimental_place_dataset_on_device = true;
  expect_row<InvalidArgumentError>("E122", [&] {
    (void)strategy.distribute_datasets_from_function([](const InputContext&) { return five_to_eight(); }, options);
  });
}

TEST(Errors, E123_PlaceDatasetOnDeviceAndFetchToDevice) {
  MirroredStrategy strategy(cpu_devices(2));
  InputOptions options;
  options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  options.experimental_place_dataset_on_device = true;
  expect_row<InvalidArgumentError>("E123", [&] {
    (void)strategy.distribute_datasets_from_function([](const InputContext&) { return five_to_eight(); }, options);
  });
}

// ---------------------------------------------------------------------------------------------
// docs/errors.md, the rows above and the registered tests agree.

std::filesystem::path doc_path() {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "docs" / "errors.md";
}

// The `...` spans of a table cell, in order.
std::vector<std::string> code_spans(const std::string& cell) {
  std::vector<std::string> spans;
  std::size_t open = cell.find('`');
  while (open != std::string::npos) {
    const std::size_t close = cell.find('`', open + 1);
    if (close == std::string::npos) break;
    spans.push_back(cell.substr(open + 1, close - open - 1));
    open = cell.find('`', close + 1);
  }
  return spans;
}

// The rows of the table "| ID | situation | error type | message (key words) |".
std::vector<Row> parse_doc_rows(std::istream& in) {
  static const std::regex kRowStart(R"(^\| (E[0-9]+) \|)");
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch match;
    if (!std::regex_search(line, match, kRowStart)) continue;
    std::vector<std::string> cells;
    std::stringstream cells_in(line);
    for (std::string cell; std::getline(cells_in, cell, '|');) cells.push_back(cell);
    // "", " E01 ", situation, type, key words (the line ends with '|', which adds no cell).
    if (cells.size() != 5) {
      ADD_FAILURE() << "a table row must have 4 cells: " << line;
      continue;
    }
    const std::vector<std::string> type = code_spans(cells[3]);
    rows.push_back({match[1], type.size() == 1 ? type[0] : cells[3], code_spans(cells[4])});
  }
  return rows;
}

// The IDs of the registered tests of this suite that are named after a row ("E07_...").
std::multiset<std::string> registered_row_tests() {
  static const std::regex kRowTest(R"(^(E[0-9]+)_)");
  std::multiset<std::string> ids;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    if (std::string(suite.name()) != "Errors") continue;
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const std::string name = suite.GetTestInfo(t)->name();
      std::smatch match;
      if (std::regex_search(name, match, kRowTest)) ids.insert(match[1]);
    }
  }
  return ids;
}

TEST(Errors, DocTableMatchesTests) {
  std::ifstream in(doc_path());
  ASSERT_TRUE(in) << "cannot read " << doc_path();
  const std::vector<Row> doc = parse_doc_rows(in);
  ASSERT_FALSE(doc.empty()) << "no rows found in " << doc_path();

  std::map<std::string, Row> doc_by_id;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const std::string expected_id = (i + 1 < 10 ? "E0" : "E") + std::to_string(i + 1);
    EXPECT_EQ(doc[i].id, expected_id) << "the doc's IDs must run E01, E02, ... without gaps";
    EXPECT_TRUE(doc_by_id.emplace(doc[i].id, doc[i]).second) << doc[i].id << " appears twice in the doc";
  }
  std::set<std::string> expected_ids;
  for (const Row& row : expected_rows()) {
    expected_ids.insert(row.id);
    auto it = doc_by_id.find(row.id);
    if (it == doc_by_id.end()) {
      ADD_FAILURE() << row.id << " is tested but missing from " << doc_path();
      continue;
    }
    EXPECT_EQ(it->second.type, row.type) << row.id << ": the doc and the test name different error types";
    EXPECT_EQ(it->second.key_words, row.key_words) << row.id << ": the doc and the test list different key words";
  }
  for (const auto& [id, row] : doc_by_id) {
    EXPECT_TRUE(expected_ids.contains(id)) << id << " is in the doc but has no entry in expected_rows()";
  }

  const std::multiset<std::string> tests = registered_row_tests();
  for (const std::string& id : expected_ids) {
    EXPECT_EQ(tests.count(id), 1u) << "row " << id << " needs exactly one test TEST(Errors, " << id << "_...)";
  }
  for (const std::string& id : tests) {
    EXPECT_TRUE(expected_ids.contains(id)) << "TEST(Errors, " << id << "_...) has no row in the doc";
  }
}

}  // namespace
}  // namespace distribute
