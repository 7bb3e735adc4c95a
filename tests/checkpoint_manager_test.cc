// CheckpointManager: numbered files and their index; max_to_keep (and <= 0 keeping all); numbering
// and the interval carried on by a new manager on the same directory (a restarted job);
// checkpoint_interval skipping saves; restore_or_initialize on a fresh start, past a corrupt or
// missing newest file (with a warning naming it), on another number of replicas, and its errors;
// a save that fails before its rename (of the checkpoint or of the index) leaving the previous
// checkpoint, the index and the manager as they were; every other error by type and message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
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

class CheckpointManagerTest : public testing::ScratchDirectoryTest {
 protected:
  std::vector<fs::path> paths(const std::vector<std::string>& names) const {
    std::vector<fs::path> out;
    for (const std::string& name : names) out.push_back(file(name));
    return out;
  }
};

TEST_F(CheckpointManagerTest, SavesNumberedFilesAndAnIndexAndKeepsTheNewest) {
  Variable w(0.0f, {.name = "w"});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir(), {.max_to_keep = 2});
  EXPECT_TRUE(fs::is_directory(dir())) << "the constructor creates the directory";
  EXPECT_EQ(manager.directory(), dir());
  EXPECT_EQ(manager.checkpoint().variables().size(), 1u);
  EXPECT_EQ(manager.latest_checkpoint(), std::nullopt);
  EXPECT_TRUE(manager.checkpoints().empty());

  for (int k = 1; k <= 3; ++k) {
    w.assign(static_cast<float>(k));
    EXPECT_EQ(manager.save(), file("ckpt-" + std::to_string(k) + ".safetensors"));
  }
  EXPECT_EQ(manager.latest_checkpoint(), file("ckpt-3.safetensors"));
  EXPECT_EQ(manager.checkpoints(), paths({"ckpt-2.safetensors", "ckpt-3.safetensors"})) << "oldest first";
  EXPECT_EQ(files(), (std::vector<std::string>{"ckpt-2.safetensors", "ckpt-3.safetensors", "ckpt.index.json"}))
      << "the oldest is deleted, no temporary file is left";
  EXPECT_EQ(read_bytes(file("ckpt.index.json")),
            "{\n"
            "  \"latest_checkpoint\": \"ckpt-3.safetensors\",\n"
            "  \"all_checkpoints\": [\n"
            "    \"ckpt-2.safetensors\",\n"
            "    \"ckpt-3.safetensors\"\n"
            "  ]\n"
            "}\n");

  w.assign(9.0f);
  Checkpoint({{"w", w}}).restore(file("ckpt-2.safetensors"));
  EXPECT_EQ(w.value().item<float>(), 2.0f) << "each file holds the values of its save";
}

TEST_F(CheckpointManagerTest, MaxToKeepZeroOrLessKeepsEveryCheckpoint) {
  for (int max_to_keep : {0, -1}) {
    const fs::path sub = dir() / std::to_string(max_to_keep + 1);
    Variable w(0.0f);
    CheckpointManager manager(Checkpoint({{"w", w}}), sub, {.max_to_keep = max_to_keep});
    for (int k = 0; k < 7; ++k) manager.save();
    EXPECT_EQ(manager.checkpoints().size(), 7u) << max_to_keep;
    EXPECT_TRUE(fs::exists(sub / "ckpt-1.safetensors")) << max_to_keep;
  }
}

TEST_F(CheckpointManagerTest, ExplicitNumbersAndANumberSavedAgain) {
  Variable w(0.0f);
  CheckpointManager manager(Checkpoint({{"w", w}}), dir(), {.max_to_keep = 3});
  EXPECT_EQ(manager.save(10), file("ckpt-10.safetensors"));
  EXPECT_EQ(manager.save(0), file("ckpt-0.safetensors"));
  EXPECT_EQ(manager.save(), file("ckpt-11.safetensors")) << "one more than the largest kept";
  w.assign(5.0f);
  EXPECT_EQ(manager.save(10), file("ckpt-10.safetensors"));
  EXPECT_EQ(manager.checkpoints(), paths({"ckpt-0.safetensors", "ckpt-11.safetensors", "ckpt-10.safetensors"}))
      << "a number saved again becomes the latest";
  w.assign(0.0f);
  EXPECT_EQ(manager.restore_or_initialize(), file("ckpt-10.safetensors"));
  EXPECT_EQ(w.value().item<float>(), 5.0f);
}

// The default number after INT64_MAX does not exist: the save is refused before anything is
// written, and the directory still serves a restarted job.
TEST_F(CheckpointManagerTest, ADefaultNumberPastTheLargestInt64IsOutOfRangeAndWritesNothing) {
  constexpr std::int64_t kLargest = std::numeric_limits<std::int64_t>::max();
  Variable w(1.0f, {.name = "w"});
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  const std::string largest = "ckpt-" + std::to_string(kLargest) + ".safetensors";
  EXPECT_EQ(manager.save(kLargest), file(largest));
  const std::vector<std::string> before = files();
  const std::string index = read_bytes(file("ckpt.index.json"));
  expect_error<OutOfRangeError>([&] { manager.save(); },
                                {"CheckpointManager::save: the largest number kept is 9223372036854775807",
                                 "pass a checkpoint_number"});
  EXPECT_EQ(files(), before) << "nothing written";
  EXPECT_EQ(read_bytes(file("ckpt.index.json")), index);
  EXPECT_EQ(manager.checkpoints(), paths({largest}));
  EXPECT_EQ(manager.save(3), file("ckpt-3.safetensors")) << "an explicit number still saves";
  w.assign(0.0f);
  CheckpointManager restarted(Checkpoint({{"w", w}}), dir());
  EXPECT_EQ(restarted.checkpoints(), paths({largest, "ckpt-3.safetensors"}));
  EXPECT_EQ(restarted.restore_or_initialize(), file("ckpt-3.safetensors"));
  EXPECT_EQ(w.value().item<float>(), 1.0f);
}

TEST_F(CheckpointManagerTest, ANewManagerOnTheSameDirectoryContinuesTheNumbering) {
  Variable w(0.0f, {.name = "w"});
  {
    CheckpointManager manager(Checkpoint({{"w", w}}), dir(), {.max_to_keep = 2});
    manager.save();
    w.assign(2.0f);
    manager.save();
  }
  w.assign(0.0f);
  CheckpointManager restarted(Checkpoint({{"w", w}}), dir(), {.max_to_keep = 2});
  EXPECT_EQ(restarted.checkpoints(), paths({"ckpt-1.safetensors", "ckpt-2.safetensors"}));
  EXPECT_EQ(restarted.restore_or_initialize(), file("ckpt-2.safetensors"));
  EXPECT_EQ(w.value().item<float>(), 2.0f);
  EXPECT_EQ(restarted.save(), file("ckpt-3.safetensors"));
  EXPECT_EQ(files(), (std::vector<std::string>{"ckpt-2.safetensors", "ckpt-3.safetensors", "ckpt.index.json"}))
      << "the new manager deletes what the old one saved";
}

TEST_F(CheckpointManagerTest, ManagersOfOtherNamesShareADirectory) {
  Variable w(0.0f);
  CheckpointManager steps(Checkpoint({{"w", w}}), dir(), {.max_to_keep = 1});
  CheckpointManager best(Checkpoint({{"w", w}}), dir(), {.max_to_keep = 1, .checkpoint_name = "best"});
  steps.save();
  best.save(7);
  steps.save();
  EXPECT_EQ(files(), (std::vector<std::string>{"best-7.safetensors", "best.index.json", "ckpt-2.safetensors",
                                               "ckpt.index.json"}));
}

TEST_F(CheckpointManagerTest, CheckpointIntervalSkipsSavesUntilTheStepHasAdvancedByIt) {
  Variable w(0.0f);
  const CheckpointManagerOptions options{.max_to_keep = 0, .checkpoint_interval = 3};
  {
    CheckpointManager manager(Checkpoint({{"w", w}}), dir(), options);
    std::vector<std::int64_t> saved;
    for (std::int64_t step = 1; step <= 8; ++step) {
      if (manager.save(step)) saved.push_back(step);
    }
    EXPECT_EQ(saved, (std::vector<std::int64_t>{1, 4, 7})) << "the first save writes, then every 3 steps";
    EXPECT_EQ(manager.save(8, /*check_interval=*/false), file("ckpt-8.safetensors"));
    EXPECT_EQ(manager.save(10), std::nullopt) << "the interval counts from the last save, 8";
  }
  CheckpointManager restarted(Checkpoint({{"w", w}}), dir(), options);
  EXPECT_EQ(restarted.save(10), std::nullopt) << "the interval carries over from the index";
  EXPECT_EQ(restarted.save(11), file("ckpt-11.safetensors"));
  EXPECT_EQ(restarted.checkpoints(), paths({"ckpt-1.safetensors", "ckpt-4.safetensors", "ckpt-7.safetensors",
                                            "ckpt-8.safetensors", "ckpt-11.safetensors"}));
  expect_error<InvalidArgumentError>([&] { restarted.save(); },
                                     {"CheckpointManager::save: checkpoint_interval is set but no checkpoint_number "
                                      "was given; pass the step as the number, or check_interval = false"});
  EXPECT_EQ(restarted.save(std::nullopt, false), file("ckpt-12.safetensors"));
}

TEST_F(CheckpointManagerTest, FreshStartRestoresNothing) {
  Variable w(4.0f);
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  EXPECT_EQ(manager.restore_or_initialize(), std::nullopt);
  EXPECT_EQ(w.value().item<float>(), 4.0f);
  EXPECT_TRUE(files().empty()) << "neither an index nor a probe file is left";
}

TEST_F(CheckpointManagerTest, ACorruptNewestCheckpointFallsBackWithAWarningThatNamesIt) {
  Variable w(0.0f);
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  w.assign(1.0f);
  manager.save();
  w.assign(2.0f);
  manager.save();
  std::string bytes = read_bytes(file("ckpt-2.safetensors"));
  bytes.back() ^= 0x40;  // the data no longer matches its CRC-32
  write_bytes(file("ckpt-2.safetensors"), bytes);

  w.assign(0.0f);
  CheckpointManager restarted(Checkpoint({{"w", w}}), dir());
  ::testing::internal::CaptureStderr();
  const std::optional<fs::path> restored = restarted.restore_or_initialize();
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(restored, file("ckpt-1.safetensors"));
  EXPECT_EQ(w.value().item<float>(), 1.0f);
  for (const std::string& word :
       {std::string("distribute: warning: CheckpointManager::restore_or_initialize: Checkpoint::restore: \"") +
            file("ckpt-2.safetensors").string() + "\" is truncated or corrupt: the data's CRC-32 is",
        "; falling back to \"" + file("ckpt-1.safetensors").string() + "\""}) {
    EXPECT_NE(warning.find(word), std::string::npos) << "the warning lacks \"" << word << "\":\n" << warning;
  }
  EXPECT_EQ(restarted.latest_checkpoint(), file("ckpt-2.safetensors")) << "restoring changes no file";
}

TEST_F(CheckpointManagerTest, AnIndexNamingAMissingFileFallsBackWithAWarning) {
  Variable w(0.0f);
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  w.assign(1.0f);
  manager.save();
  w.assign(2.0f);
  manager.save();
  fs::remove(file("ckpt-2.safetensors"));
  w.assign(0.0f);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(manager.restore_or_initialize(), file("ckpt-1.safetensors"));
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(w.value().item<float>(), 1.0f);
  const std::string expected = "distribute: warning: CheckpointManager::restore_or_initialize: \"" +
                               file("ckpt-2.safetensors").string() + "\", named by the index \"" +
                               file("ckpt.index.json").string() + "\", is missing; falling back to \"" +
                               file("ckpt-1.safetensors").string() + "\"\n";
  EXPECT_EQ(warning, expected);
}

TEST_F(CheckpointManagerTest, NoReadableCheckpointIsDataLossListingEach) {
  Variable w(0.0f);
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  manager.save();
  manager.save();
  fs::remove(file("ckpt-2.safetensors"));
  write_bytes(file("ckpt-1.safetensors"), "short");
  ::testing::internal::CaptureStderr();
  expect_error<DataLossError>(
      [&] { manager.restore_or_initialize(); },
      {"CheckpointManager::restore_or_initialize: none of the 2 checkpoints in \"" +
           file("ckpt.index.json").string() + "\" can be restored:\n  \"" + file("ckpt-2.safetensors").string() +
           "\", named by the index",
       "\n  Checkpoint::restore: \"" + file("ckpt-1.safetensors").string() + "\" is truncated or corrupt"});
  ::testing::internal::GetCapturedStderr();
}

TEST_F(CheckpointManagerTest, ACheckpointOfAnotherModelIsTheCheckpointsInvalidArgument) {
  Variable w(0.0f);
  CheckpointManager(Checkpoint({{"w", w}}), dir()).save();
  Variable v(Tensor::zeros(DType::kFloat32, Shape{2}));
  CheckpointManager other(Checkpoint({{"v", v}}), dir());
  expect_error<InvalidArgumentError>([&] { other.restore_or_initialize(); },
                                     {"Checkpoint::restore: \"" + file("ckpt-1.safetensors").string() +
                                          "\" does not match the checkpoint's variables (2 mismatches)",
                                      "'v': in the checkpoint, not in the file", "'w': in the file, not in the "
                                                                                 "checkpoint"});
}

TEST_F(CheckpointManagerTest, RestoresOnAnotherNumberOfReplicas) {
  MirroredStrategy two(cpu_devices(2));
  Variable w;
  Variable metric;
  {
    StrategyScope scope = two.scope();
    w = Variable(Tensor::from_vector<float>({1, 2}), {.name = "w"});
    metric = Variable(0.0f, {.synchronization = VariableSynchronization::kOnRead,
                             .aggregation = VariableAggregation::kSum});
  }
  two.run([&] { metric.assign(static_cast<float>(get_replica_context()->replica_id_in_sync_group() + 1)); });
  CheckpointManager(Checkpoint({{"w", w}, {"metric", metric}}), dir()).save();

  MirroredStrategy three(cpu_devices(3));
  Variable w3;
  Variable metric3;
  {
    StrategyScope scope = three.scope();
    w3 = Variable(Tensor::zeros(DType::kFloat32, Shape{2}), {.name = "w"});
    metric3 = Variable(0.0f, {.synchronization = VariableSynchronization::kOnRead,
                              .aggregation = VariableAggregation::kSum});
  }
  CheckpointManager manager(Checkpoint({{"w", w3}, {"metric", metric3}}), dir());
  EXPECT_EQ(manager.restore_or_initialize(), file("ckpt-1.safetensors"));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(w3.component(r).to_vector<float>(), (std::vector<float>{1, 2})) << r;
  EXPECT_EQ(metric3.value().item<float>(), 3.0f) << "the on-read sum saved on two replicas reads back the same";
}

TEST_F(CheckpointManagerTest, ASaveThatFailsBeforeItsRenameLeavesTheLastCheckpointAndTheIndex) {
  Variable w(1.0f);
  CheckpointManager manager(Checkpoint({{"w", w}}), dir(), {.max_to_keep = 1});
  manager.save();
  const std::string index = read_bytes(file("ckpt.index.json"));
  const std::string first = read_bytes(file("ckpt-1.safetensors"));

  // A directory where the new checkpoint's file goes: its rename fails after the write.
  fs::create_directories(file("ckpt-2.safetensors") / "blocker");
  w.assign(2.0f);
  expect_error<InternalError>([&] { manager.save(); },
                              {"Checkpoint::save: cannot rename", "to \"" + file("ckpt-2.safetensors").string()});
  EXPECT_EQ(read_bytes(file("ckpt.index.json")), index);
  EXPECT_EQ(read_bytes(file("ckpt-1.safetensors")), first);
  EXPECT_EQ(manager.checkpoints(), paths({"ckpt-1.safetensors"}));
  EXPECT_EQ(files(), (std::vector<std::string>{"ckpt-1.safetensors", "ckpt-2.safetensors", "ckpt.index.json"}))
      << "no temporary file is left";
  fs::remove_all(file("ckpt-2.safetensors"));

  // The same for the index: the new checkpoint is written but not listed, and the old one stays.
  fs::remove(file("ckpt.index.json"));
  fs::create_directories(file("ckpt.index.json") / "blocker");
  expect_error<InternalError>([&] { manager.save(); },
                              {"CheckpointManager::save: cannot rename",
                               "to \"" + file("ckpt.index.json").string() + "\""});
  EXPECT_EQ(read_bytes(file("ckpt-1.safetensors")), first) << "max_to_keep deletes nothing before the index is written";
  EXPECT_EQ(manager.checkpoints(), paths({"ckpt-1.safetensors"}));
  fs::remove_all(file("ckpt.index.json"));

  EXPECT_EQ(manager.save(), file("ckpt-2.safetensors")) << "the manager saves on once the path is free";
  EXPECT_EQ(files(), (std::vector<std::string>{"ckpt-2.safetensors", "ckpt.index.json"}));
  w.assign(0.0f);
  EXPECT_EQ(CheckpointManager(Checkpoint({{"w", w}}), dir()).restore_or_initialize(), file("ckpt-2.safetensors"));
  EXPECT_EQ(w.value().item<float>(), 2.0f);
}

TEST_F(CheckpointManagerTest, DirectoriesThatCannotBeUsed) {
  const Checkpoint checkpoint({{"w", Variable(1.0f)}});
  fs::create_directories(dir());
  write_bytes(file("file"), "x");
  expect_error<InvalidArgumentError>([&] { CheckpointManager m(checkpoint, file("file") / "sub"); },
                                     {"CheckpointManager: cannot create the directory \"" +
                                          (file("file") / "sub").string() + "\": Not a directory"});
  expect_error<InvalidArgumentError>([&] { CheckpointManager m(checkpoint, file("file")); },
                                     {"CheckpointManager: cannot create the directory \"" + file("file").string() +
                                      "\""});
  // /proc exists and refuses new files, even to root, whom permission bits do not stop.
  expect_error<InvalidArgumentError>([&] { CheckpointManager m(checkpoint, "/proc"); },
                                     {"CheckpointManager: cannot write in the directory \"/proc\""});
  expect_error<InvalidArgumentError>(
      [&] { CheckpointManager m(checkpoint, ""); },
      {"CheckpointManager: the directory is empty; give the directory to keep checkpoints in"});
}

TEST_F(CheckpointManagerTest, OptionsOutOfRange) {
  const Checkpoint checkpoint({{"w", Variable(1.0f)}});
  // The name is quoted as JSON, so that a NUL in it shows instead of ending the message.
  const std::vector<std::pair<std::string, std::string>> names = {
      {"", "\"\""}, {"a/b", "\"a/b\""}, {std::string("a\0b", 3), "\"a\\u0000b\""}};
  for (const auto& [name, quoted] : names) {
    expect_error<InvalidArgumentError>(
        [&] { CheckpointManager m(checkpoint, dir(), {.checkpoint_name = name}); },
        {"CheckpointManager: checkpoint_name " + quoted + " is no file name; give a non-empty name without '/'"});
  }
  // The index is JSON: a name that is not UTF-8 is refused before anything is written.
  expect_error<InvalidArgumentError>(
      [&] { CheckpointManager m(checkpoint, dir(), {.checkpoint_name = "ckpt\xff"}); },
      {"CheckpointManager: checkpoint_name \"ckpt\xef\xbf\xbd\" is not valid UTF-8 (the invalid bytes shown as "
       "U+FFFD); the index is JSON, whose strings are UTF-8"});
  EXPECT_FALSE(fs::exists(dir())) << "nothing is made for a name that is refused";
  for (std::int64_t interval : {0, -5}) {
    expect_error<InvalidArgumentError>(
        [&] { CheckpointManager m(checkpoint, dir(), {.checkpoint_interval = interval}); },
        {"CheckpointManager: checkpoint_interval is " + std::to_string(interval) +
         "; give a number of steps > 0, or leave it unset to save at every call"});
  }
  EXPECT_FALSE(fs::exists(dir())) << "options are checked before the directory is created";
  CheckpointManager manager(checkpoint, dir());
  expect_error<InvalidArgumentError>([&] { manager.save(-1); },
                                     {"CheckpointManager::save: checkpoint_number is -1; checkpoints are numbered "
                                      "from 0"});
  EXPECT_TRUE(manager.checkpoints().empty());
}

TEST_F(CheckpointManagerTest, ACorruptIndexIsDataLossAtConstruction) {
  const Checkpoint checkpoint({{"w", Variable(1.0f)}});
  fs::create_directories(dir());
  const std::string index = file("ckpt.index.json").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "is not valid JSON"},
      {"[]", "has no \"all_checkpoints\" list"},
      {"{\"all_checkpoints\": 3}", "has no \"all_checkpoints\" list"},
      {"{\"all_checkpoints\": [\"other-1.safetensors\"]}",
       "lists \"other-1.safetensors\", which is no \"ckpt-<number>.safetensors\" file name"},
      {"{\"all_checkpoints\": [\"ckpt--1.safetensors\"]}", "lists \"ckpt--1.safetensors\", which is no"},
      {"{\"all_checkpoints\": [\"ckpt-1x.safetensors\"]}", "lists \"ckpt-1x.safetensors\", which is no"},
      {"{\"all_checkpoints\": [1]}", "lists 1, which is no"},
      {"{\"all_checkpoints\": [\"ckpt-1.safetensors\", \"ckpt-1.safetensors\"]}",
       "lists \"ckpt-1.safetensors\" twice"},
  };
  for (const auto& [text, message] : cases) {
    write_bytes(index, text);
    expect_error<DataLossError>([&] { CheckpointManager m(checkpoint, dir()); },
                                {"CheckpointManager: the index \"" + index + "\" " + message});
  }
  fs::remove(index);
  fs::create_directories(file("ckpt.index.json") / "inside");
  expect_error<DataLossError>([&] { CheckpointManager m(checkpoint, dir()); },
                              {"CheckpointManager: the index \"" + index + "\" is not a regular file"});
}

// Only the number save writes names a checkpoint, so that each number has one file name: "ckpt-02"
// is not "ckpt-2" (the manager would delete or restore another file than the index names).
TEST_F(CheckpointManagerTest, AnIndexNamingANumberSpelledAnotherWayIsDataLoss) {
  const Checkpoint checkpoint({{"w", Variable(1.0f)}});
  fs::create_directories(dir());
  const std::string index = file("ckpt.index.json").string();
  for (const std::string name : {"ckpt-02.safetensors", "ckpt-00.safetensors", "ckpt--0.safetensors",
                                 "ckpt-+2.safetensors", "ckpt- 2.safetensors", "ckpt-2 .safetensors",
                                 "ckpt-9223372036854775808.safetensors"}) {
    write_bytes(index, "{\"all_checkpoints\": [\"ckpt-1.safetensors\", \"" + name + "\"]}");
    expect_error<DataLossError>([&] { CheckpointManager m(checkpoint, dir()); },
                                {"CheckpointManager: the index \"" + index + "\" lists \"" + name +
                                     "\", which is no \"ckpt-<number>.safetensors\" file name",
                                 "<number> as save writes it: decimal digits without a sign or leading zeros"});
  }
}

TEST_F(CheckpointManagerTest, SaveAndRestoreInsideAReplicaAreFailedPreconditions) {
  MirroredStrategy strategy(cpu_devices(2));
  Variable w;
  {
    StrategyScope scope = strategy.scope();
    w = Variable(1.0f);
  }
  CheckpointManager manager(Checkpoint({{"w", w}}), dir());
  expect_error<FailedPreconditionError>([&] { strategy.run([&] { manager.save(); }); },
                                        {"CheckpointManager::save: called inside a replica's fn"});
  expect_error<FailedPreconditionError>([&] { strategy.run([&] { manager.restore_or_initialize(); }); },
                                        {"CheckpointManager::restore_or_initialize: called inside a replica's fn"});
  EXPECT_TRUE(files().empty());
}

}  // namespace
}  // namespace distribute
