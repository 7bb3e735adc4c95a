// Checkpoint: a round trip of every dtype; the file's exact safetensors layout, read back by hand
// (header length, JSON header, CRC-32, little-endian data); restoring files of other safetensors
// writers; mirrored variables saved once and restored into every component (also under another
// number of replicas), on-read variables saved as their aggregate; truncated and corrupt files
// (DataLossError) and mismatched names, dtypes and shapes (one InvalidArgumentError listing all),
// each changing nothing; the atomic save and every other error.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/files.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

namespace fs = std::filesystem;
using testing::cpu_devices;
using testing::expect_error;
using testing::read_bytes;
using testing::write_bytes;

template <class T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A safetensors file made by hand: the 8-byte little-endian header length, the header, the data.
std::string safetensors(const std::string& header, const std::string& data) {
  const std::uint64_t size = header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((size >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string hex_crc32(const std::string& data) {
  const auto crc = crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size()));
  char text[9];
  std::snprintf(text, sizeof(text), "%08lx", crc);
  return text;
}

class CheckpointTest : public testing::ScratchDirectoryTest {
 protected:
  void SetUp() override {
    ScratchDirectoryTest::SetUp();
    fs::create_directories(dir());
  }
};

TEST_F(CheckpointTest, RoundTripOfEveryDType) {
  Variable w(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3}), {.name = "w"});
  Variable d(Tensor::from_vector<double>({0.25, -1e300}), {.name = "d"});
  Variable i(Tensor::from_vector<std::int32_t>({-7, 8, 9}), {.name = "i"});
  Variable step(std::int64_t{1} << 40, {.name = "step"});
  Variable h(Tensor::from_vector<Half>({Half(1.5f), Half(-2.0f)}), {.name = "h"});
  Variable b(Tensor::from_vector<BFloat16>({BFloat16(3.0f)}), {.name = "b"});
  Variable empty(Tensor::zeros(DType::kFloat32, Shape{0, 4}), {.name = "empty"});
  Checkpoint checkpoint({{"w", w}, {"d", d}, {"i", i}, {"step", step}, {"h", h}, {"b", b}, {"empty", empty}});
  checkpoint.save(file("ckpt.safetensors"));

  w.assign(Tensor::zeros(DType::kFloat32, Shape{2, 3}));
  d.assign(Tensor::zeros(DType::kFloat64, Shape{2}));
  i.assign(Tensor::zeros(DType::kInt32, Shape{3}));
  step.assign(std::int64_t{0});
  h.assign(Tensor::zeros(DType::kFloat16, Shape{2}));
  b.assign(Tensor::zeros(DType::kBFloat16, Shape{1}));
  checkpoint.restore(file("ckpt.safetensors"));

  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(d.value().to_vector<double>(), (std::vector<double>{0.25, -1e300}));
  EXPECT_EQ(i.value().to_vector<std::int32_t>(), (std::vector<std::int32_t>{-7, 8, 9}));
  EXPECT_EQ(step.value().item<std::int64_t>(), std::int64_t{1} << 40);
  EXPECT_EQ(static_cast<float>(h.value().to_vector<Half>()[1]), -2.0f);
  EXPECT_EQ(static_cast<float>(b.value().item<BFloat16>()), 3.0f);
  EXPECT_EQ(empty.value().shape(), (Shape{0, 4}));
  EXPECT_EQ(files(), (std::vector<std::string>{"ckpt.safetensors"})) << "no temporary file is left";
}

TEST_F(CheckpointTest, TheFileIsSafetensorsByteForByte) {
  Variable w(Tensor::from_vector<float>({1, 2}), {.name = "w"});
  Variable step(std::int64_t{7}, {.name = "step"});
  Checkpoint({{"w", w}, {"step", step}}).save(file("ckpt"));
  const std::string bytes = read_bytes(file("ckpt"));

  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t header_size = 0;
  for (std::size_t k = 8; k-- > 0;) header_size = (header_size << 8) | static_cast<unsigned char>(bytes[k]);
  EXPECT_EQ(header_size % 8, 0u) << "the header is padded to 8 bytes";
  ASSERT_LE(8 + header_size, bytes.size());
  const std::string data = bytes.substr(8 + header_size);
  EXPECT_EQ(data, raw<float>({1, 2}) + raw<std::int64_t>({7}));
  std::string header = bytes.substr(8, header_size);
  const std::string json = "{\"__metadata__\":{\"distribute.crc32\":\"" + hex_crc32(data) +
                           "\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}";
  EXPECT_EQ(header, json + std::string(header_size - json.size(), ' '));
}

// A large checkpoint's CRC is computed while its data is written, and its header rewritten.
TEST_F(CheckpointTest, ALargeCheckpointsHeaderHoldsTheCrcOfItsData) {
  std::vector<float> values(std::size_t{3} << 20);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977);
  Variable w(Tensor::from_vector<float>(values, {static_cast<std::int64_t>(values.size())}), {.name = "w"});
  Checkpoint({{"w", w}}).save(file("big"));
  const std::string bytes = read_bytes(file("big"));
  std::uint64_t header_size = 0;
  for (std::size_t k = 8; k-- > 0;) header_size = (header_size << 8) | static_cast<unsigned char>(bytes[k]);
  const std::string data = bytes.substr(8 + header_size);
  EXPECT_EQ(data.size(), values.size() * sizeof(float));
  EXPECT_NE(bytes.find("\"distribute.crc32\":\"" + hex_crc32(data) + "\""), std::string::npos);
  w.assign(Tensor::zeros(DType::kFloat32, w.shape()));
  Checkpoint({{"w", w}}).restore(file("big"));
  EXPECT_EQ(w.value().to_vector<float>(), values);
}

TEST_F(CheckpointTest, RestoresFilesOfOtherSafetensorsWriters) {
  // As Python's safetensors writes them: other metadata or none, the keys in any order, the data
  // in another order than the keys, the header padded with spaces.
  const std::string header =
      "{\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
      "\"__metadata__\":{\"format\":\"pt\"},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[8,16]}}   ";
  write_bytes(file("other"), safetensors(header, raw<std::int64_t>({42}) + raw<float>({-1.5f, 2.5f})));
  Variable w(Tensor::zeros(DType::kFloat32, Shape{2, 1}));
  Variable step(std::int64_t{0});
  Checkpoint({{"w", w}, {"step", step}}).restore(file("other"));
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{-1.5f, 2.5f}));
  EXPECT_EQ(step.value().item<std::int64_t>(), 42);
}

TEST_F(CheckpointTest, MirroredVariablesAreSavedOnceAndRestoredIntoEveryComponent) {
  MirroredStrategy two(cpu_devices(2));
  Variable w;
  {
    StrategyScope scope = two.scope();
    w = Variable(Tensor::from_vector<float>({3, 4}), {.name = "w"});
  }
  Checkpoint({{"w", w}}).save(file("ckpt"));
  const std::string header = read_bytes(file("ckpt")).substr(8);
  EXPECT_NE(header.find("\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"), std::string::npos);

  MirroredStrategy three(cpu_devices(3));
  Variable restored;
  {
    StrategyScope scope = three.scope();
    restored = Variable(Tensor::zeros(DType::kFloat32, Shape{2}), {.name = "w"});
  }
  Checkpoint({{"w", restored}}).restore(file("ckpt"));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(restored.component(r).to_vector<float>(), (std::vector<float>{3, 4})) << r;
  Variable single(Tensor::zeros(DType::kFloat32, Shape{2}));
  Checkpoint({{"w", single}}).restore(file("ckpt"));
  EXPECT_EQ(single.value().to_vector<float>(), (std::vector<float>{3, 4}));
}

// Saves and restores on another thread while the training thread's steps update a variable of a
// million elements: each save is one step's value (every element alike), never parts of two, and
// each restore lands between steps (the steps that follow add to it whole).
TEST_F(CheckpointTest, SavesAndRestoresOnAnotherThreadLandBetweenSteps) {
  MirroredStrategy strategy(cpu_devices(2));
  constexpr std::int64_t kSize = 1 << 20;
  Variable w;
  {
    StrategyScope scope = strategy.scope();
    w = Variable(Tensor::zeros(DType::kFloat32, Shape{kSize}), {.name = "w"});
  }
  const Tensor ones = Tensor::from_vector<float>(std::vector<float>(kSize, 1.0f), Shape{kSize});
  std::atomic<bool> done{false};
  std::thread steps([&] {
    for (int step = 0; step < 400 && !done.load(); ++step) strategy.run([&] { w.assign_add(ones); });
  });
  constexpr int kSaves = 30;
  for (int i = 0; i < kSaves; ++i) Checkpoint({{"w", w}}).save(file("ckpt-" + std::to_string(i)));
  Checkpoint({{"w", w}}).restore(file("ckpt-0"));
  done.store(true);
  steps.join();
  Variable probe(Tensor::zeros(DType::kFloat32, Shape{kSize}));
  for (int i = 0; i < kSaves; ++i) {
    Checkpoint({{"w", probe}}).restore(file("ckpt-" + std::to_string(i)));
    const std::vector<float> saved = probe.value().to_vector<float>();
    const auto torn = std::count_if(saved.begin(), saved.end(), [&](float v) { return v != saved[0]; });
    EXPECT_EQ(torn, 0) << "save " << i << " mixes two steps: element 0 is " << saved[0];
  }
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> now = w.component(r).to_vector<float>();
    const auto torn = std::count_if(now.begin(), now.end(), [&](float v) { return v != now[0]; });
    EXPECT_EQ(torn, 0) << "replica " << r << " after a restore between steps";
  }
}

TEST_F(CheckpointTest, OnReadVariablesAreSavedAsTheirAggregateAndReadBackTheSame) {
  MirroredStrategy strategy(cpu_devices(2));
  Variable sum;
  Variable mean;
  {
    StrategyScope scope = strategy.scope();
    sum = Variable(0.0f, {.synchronization = VariableSynchronization::kOnRead,
                          .aggregation = VariableAggregation::kSum});
    mean = Variable(0.0f, {.synchronization = VariableSynchronization::kOnRead,
                           .aggregation = VariableAggregation::kMean});
  }
  strategy.run([&] {
    const float r = static_cast<float>(get_replica_context()->replica_id_in_sync_group());
    sum.assign(r + 1);   // components 1, 2
    mean.assign(r + 1);  // components 1, 2
  });
  Checkpoint checkpoint({{"sum", sum}, {"mean", mean}});
  checkpoint.save(file("ckpt"));
  const std::string bytes = read_bytes(file("ckpt"));
  EXPECT_EQ(bytes.substr(bytes.size() - 8), raw<float>({3.0f, 1.5f}));
  strategy.run([&] {
    sum.assign(9.0f);
    mean.assign(9.0f);
  });
  checkpoint.restore(file("ckpt"));
  EXPECT_EQ(sum.component(0).item<float>(), 1.5f);
  EXPECT_EQ(sum.component(1).item<float>(), 1.5f);
  EXPECT_EQ(sum.value().item<float>(), 3.0f);
  EXPECT_EQ(mean.value().item<float>(), 1.5f);
}

TEST_F(CheckpointTest, SaveReplacesAnExistingFile) {
  Variable w(1.0f);
  Checkpoint checkpoint({{"w", w}});
  checkpoint.save(file("ckpt"));
  w.assign(2.0f);
  checkpoint.save(file("ckpt"));
  w.assign(3.0f);
  checkpoint.restore(file("ckpt"));
  EXPECT_EQ(w.value().item<float>(), 2.0f);
  EXPECT_EQ(files(), (std::vector<std::string>{"ckpt"}));
}

TEST_F(CheckpointTest, EveryTruncationIsDataLossAndChangesNothing) {
  Variable w(Tensor::from_vector<float>({1, 2, 3}), {.name = "w"});
  Variable step(std::int64_t{5}, {.name = "step"});
  Checkpoint checkpoint({{"w", w}, {"step", step}});
  checkpoint.save(file("ckpt"));
  const std::string bytes = read_bytes(file("ckpt"));
  w.assign(Tensor::from_vector<float>({7, 8, 9}));
  step.assign(std::int64_t{6});
  for (std::size_t size = 0; size < bytes.size(); ++size) {
    write_bytes(file("cut"), bytes.substr(0, size));
    const std::string what = expect_error<DataLossError>([&] { checkpoint.restore(file("cut")); },
                                                         {"Checkpoint::restore: \"", "\" is truncated or corrupt: "});
    ASSERT_FALSE(what.empty()) << "a file cut to " << size << " of " << bytes.size() << " bytes";
    EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{7, 8, 9}));
    EXPECT_EQ(step.value().item<std::int64_t>(), 6);
  }
  expect_error<DataLossError>([&] { checkpoint.restore(file("cut")); },
                              {"the header describes 20 bytes of data but the file has 19"});
  write_bytes(file("cut"), bytes.substr(0, 5));
  expect_error<DataLossError>([&] { checkpoint.restore(file("cut")); },
                              {"it has 5 bytes, fewer than the 8 of a safetensors header length"});
}

TEST_F(CheckpointTest, CorruptFilesAreDataLossAndChangeNothing) {
  Variable w(Tensor::from_vector<float>({1, 2}), {.name = "w"});
  Checkpoint checkpoint({{"w", w}});
  const std::string two_floats = raw<float>({5, 6});
  const std::string entry = "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  struct Case {
    std::string name;
    std::string bytes;
    std::string key_words;
  };
  checkpoint.save(file("good"));
  std::string flipped = read_bytes(file("good"));
  flipped.back() = static_cast<char>(flipped.back() ^ 1);
  std::string long_header = safetensors("{" + entry + "}", two_floats);
  long_header[0] = static_cast<char>(0xff);
  const std::vector<Case> cases = {
      {"a flipped data bit", flipped, "the data's CRC-32 is"},
      {"a header length beyond the file", long_header, "its header length says 255"},
      {"a header that is not JSON", safetensors("{\"w\":", two_floats), "its header is not valid JSON"},
      {"a header that is a list", safetensors("[1, 2]", two_floats), "its header is not a JSON object"},
      {"an entry that is not an object", safetensors("{\"w\":3}", two_floats),
       "tensor 'w' is not described by an object"},
      {"no dtype", safetensors("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", two_floats),
       "tensor 'w' has no string \"dtype\""},
      {"an unknown dtype", safetensors("{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", two_floats),
       "tensor 'w' has the unknown dtype \"F33\""},
      {"a negative dimension",
       safetensors("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", two_floats),
       "tensor 'w' has no \"shape\" list of non-negative integers"},
      {"a shape whose size overflows",
       safetensors("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
                   two_floats),
       "tensor 'w' has a shape whose size overflows"},
      {"no data offsets", safetensors("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", two_floats),
       "tensor 'w' has no \"data_offsets\" pair of non-negative integers"},
      {"offsets that do not fit the shape",
       safetensors("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", two_floats),
       "tensor 'w' has data_offsets [0, 4] for 2 elements of F32, which take 8 bytes"},
      {"overlapping tensors",
       safetensors("{" + entry + ",\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", two_floats),
       "its data offsets overlap or leave a gap"},
      {"a gap before the first tensor",
       safetensors("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", two_floats),
       "tensor 'w' starts at data byte 4 where the data starts (its data offsets overlap or leave a gap)"},
      {"bytes after the last tensor", safetensors("{" + entry + "}", two_floats + "x"),
       "the header describes 8 bytes of data but the file has 9"},
      {"metadata that is not an object", safetensors("{\"__metadata__\":[],"  + entry + "}", two_floats),
       "its __metadata__ is not an object"},
      {"metadata that is not a string", safetensors("{\"__metadata__\":{\"x\":1}," + entry + "}", two_floats),
       "its __metadata__ entry 'x' is not a string"},
  };
  for (const Case& c : cases) {
    write_bytes(file("bad"), c.bytes);
    const std::string what =
        expect_error<DataLossError>([&] { checkpoint.restore(file("bad")); }, {"is truncated or corrupt", c.key_words});
    EXPECT_FALSE(what.empty()) << c.name;
    EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{1, 2})) << c.name;
  }
  // The same file with a well-formed header restores: the cases above fail for their fault only.
  write_bytes(file("bad"), safetensors("{" + entry + "}", two_floats));
  checkpoint.restore(file("bad"));
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{5, 6}));
}

TEST_F(CheckpointTest, MismatchesAreListedAllAtOnceAndChangeNothing) {
  const std::string header =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[8,16]},"
      "\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[16,17]},"
      "\"extra\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[17,21]}}";
  write_bytes(file("ckpt"), safetensors(header, raw<float>({1, 2}) + raw<double>({3}) + "u" + raw<float>({4})));
  Variable w(Tensor::from_vector<float>({0, 0, 0}), {.name = "w"});
  Variable b(0.0f, {.name = "b"});
  Variable u(Tensor::zeros(DType::kFloat32, Shape{1}), {.name = "u"});
  Variable v(0.0f, {.name = "v"});
  Checkpoint checkpoint({{"w", w}, {"b", b}, {"u", u}, {"v", v}});
  const std::string what = expect_error<InvalidArgumentError>(
      [&] { checkpoint.restore(file("ckpt")); },
      {"does not match the checkpoint's variables (5 mismatches):\n"
       "  'w': shape (2,) in the file, (3,) in the checkpoint\n"
       "  'b': dtype F64 in the file, float32 (F32) in the checkpoint\n"
       "  'u': dtype U8 in the file, float32 (F32) in the checkpoint\n"
       "  'v': in the checkpoint, not in the file\n"
       "  'extra': in the file, not in the checkpoint"});
  EXPECT_NE(what.find(file("ckpt").string()), std::string::npos) << "the message names the file";
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(b.value().item<float>(), 0.0f);
}

TEST_F(CheckpointTest, ConstructorChecks) {
  const Variable w(1.0f);
  expect_error<InvalidArgumentError>([&] { Checkpoint c({{"w", w}, {"", w}}); },
                                     {"Checkpoint: entry 1 has an empty name"});
  expect_error<InvalidArgumentError>([&] { Checkpoint c({{"w", w}, {"w", Variable(2.0f)}}); },
                                     {"Checkpoint: the name 'w' is given twice"});
  expect_error<InvalidArgumentError>(
      [&] { Checkpoint c({{"__metadata__", w}}); },
      {"Checkpoint: entry 0 is named '__metadata__', the key safetensors keeps for the header's metadata"});
  // A name that is not UTF-8 could not go into the JSON header: refused here, not at the first save.
  expect_error<InvalidArgumentError>([&] { Checkpoint c({{"w", w}, {"b\xff", w}}); },
                                     {"Checkpoint: entry 1's name \"b\xef\xbf\xbd\" is not valid UTF-8 (the invalid "
                                      "bytes shown as U+FFFD); the file's header is JSON, whose names are UTF-8"});
  expect_error<InvalidArgumentError>([&] { Checkpoint c({{"v", Variable()}}); },
                                     {"Checkpoint: the variable named 'v' is undefined (default-constructed)"});
  EXPECT_EQ(Checkpoint({{"a", w}}).variables().size(), 1u);
}

TEST_F(CheckpointTest, SaveAndRestoreInsideAReplicaAreFailedPreconditions) {
  MirroredStrategy strategy(cpu_devices(2));
  Variable w;
  {
    StrategyScope scope = strategy.scope();
    w = Variable(1.0f);
  }
  Checkpoint checkpoint({{"w", w}});
  expect_error<FailedPreconditionError>([&] { strategy.run([&] { checkpoint.save(file("ckpt")); }); },
                                        {"Checkpoint::save: called inside a replica's fn"});
  expect_error<FailedPreconditionError>([&] { strategy.run([&] { checkpoint.restore(file("ckpt")); }); },
                                        {"Checkpoint::restore: called inside a replica's fn"});
  EXPECT_TRUE(files().empty());
}

TEST_F(CheckpointTest, PathsThatCannotBeUsed) {
  Variable w(1.0f);
  Checkpoint checkpoint({{"w", w}});
  expect_error<InvalidArgumentError>([&] { checkpoint.save(file("missing") / "ckpt"); },
                                     {"Checkpoint::save: cannot create", "No such file or directory"});
  expect_error<InvalidArgumentError>([&] { checkpoint.restore(file("missing")); },
                                     {"Checkpoint::restore: cannot open", "No such file or directory"});
  fs::create_directories(file("dir") / "inside");
  expect_error<InternalError>([&] { checkpoint.save(file("dir")); },
                              {"Checkpoint::save: cannot rename", "to \"" + file("dir").string() + "\""});
  EXPECT_EQ(files(), (std::vector<std::string>{"dir"})) << "the temporary file is removed";
}

// Restoring a directory used to throw std::ios_base::failure from the read, outside the taxonomy.
TEST_F(CheckpointTest, EveryPathErrorIsADistributeError) {
  Variable w(1.0f);
  Checkpoint checkpoint({{"w", w}});
  fs::create_directories(file("dir"));
  expect_error<InvalidArgumentError>([&] { checkpoint.restore(file("dir")); },
                                     {"Checkpoint::restore: \"" + file("dir").string() + "\" is a directory",
                                      "pass the path of a checkpoint file"});
  // A path below a regular file can be neither written nor read.
  checkpoint.save(file("ckpt"));
  expect_error<InvalidArgumentError>([&] { checkpoint.save(file("ckpt") / "inside"); },
                                     {"Checkpoint::save: cannot create", "Not a directory"});
  expect_error<InvalidArgumentError>([&] { checkpoint.restore(file("ckpt") / "inside"); },
                                     {"Checkpoint::restore: cannot open", "Not a directory"});
  // An empty directory is no file to replace either.
  fs::create_directories(file("empty"));
  try {
    checkpoint.save(file("empty"));
    ADD_FAILURE() << "saving over a directory succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Checkpoint::save"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files(), (std::vector<std::string>{"ckpt", "dir", "empty"})) << "nothing is left behind";
  checkpoint.restore(file("ckpt"));
}

TEST(DataLossError, IsTheErrorOfAbslDataLoss) {
  try {
    throw_status(absl::DataLossError("torn"));
    FAIL() << "throw_status did not throw";
  } catch (const DataLossError& e) {
    EXPECT_EQ(e.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(std::string(e.what()), "torn");
    EXPECT_EQ(e.status(), absl::DataLossError("torn"));
  }
}

}  // namespace
}  // namespace distribute
