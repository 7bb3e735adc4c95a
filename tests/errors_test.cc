// docs/errors.md, row by row: one test per row, named after the row's ID, that provokes the
// situation and checks the exact exception type and the row's key words; and a test that the doc's
// table, the expectations below and the registered tests list the same rows, so they cannot drift.
// The rows' tests are in errors_test_<subject>.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <istream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "distribute/distribute.h"
#include "errors_test.h"

namespace distribute::testing {

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
      {"E124", "InvalidArgumentError", {"CommunicationOptions::compression is", "pass Compression::kNone"}},
  };
  return rows;
}


const Row* find_row(std::string_view id) {
  for (const Row& row : expected_rows()) {
    if (row.id == id) return &row;
  }
  return nullptr;
}


}  // namespace distribute::testing

namespace distribute {
namespace {

using testing::expected_rows;
using testing::Row;

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
