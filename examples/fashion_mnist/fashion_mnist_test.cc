// The Fashion-MNIST example's tests: its reader turns bad files into errors that name them, its
// metrics file keeps a resumed run's earlier epochs, and its training loop learns, is exactly
// data-parallel (1, 3 and 4 replicas reach the same weights), and resumes from a checkpoint as if it
// had never stopped; on GPUs it reaches the host's weights. The training tests need Debian's
// dataset-fashion-mnist and skip, saying so, without it (and the GPU ones without a GPU).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "idx.h"
#include "metrics_csv.h"
#include "trainer.h"

namespace fashion_mnist {
namespace {

using distribute::DataLossError;
using distribute::InvalidArgumentError;
using distribute::MirroredStrategy;
using distribute::Tensor;
using distribute::Variable;

const std::filesystem::path kDataDir = "/usr/share/datasets/fashion-mnist";

#define REQUIRE_FASHION_MNIST()                                                                              \
  if (!std::filesystem::exists(kDataDir / "train-images-idx3-ubyte.gz")) {                                   \
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << kDataDir << " (apt-get install dataset-fashion-mnist)"; \
  }

// Runs fn and expects an exception of type E whose message contains every one of `parts`.
template <class E, class Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another exception: " << e.what();
  }
}

class Files : public ::testing::Test {
 protected:
  Files() : dir_(std::filesystem::temp_directory_path() / ("fashion_mnist_test." + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
  }
  ~Files() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path gzip(const std::string& name, const std::vector<std::uint8_t>& bytes) const {
    const std::filesystem::path path = dir_ / name;
    gzFile file = gzopen(path.c_str(), "wb");
    gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(file);
    return path;
  }
  std::filesystem::path plain(const std::string& name, const std::vector<std::uint8_t>& bytes) const {
    const std::filesystem::path path = dir_ / name;
    std::FILE* file = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), file);
    std::fclose(file);
    return path;
  }

  static void put(std::vector<std::uint8_t>& bytes, std::uint32_t word) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<std::uint8_t>(word >> shift));
  }
  // An IDX file of `count` images of rows x cols pixels, or its first `keep` bytes.
  static std::vector<std::uint8_t> images(std::uint32_t count, std::uint32_t rows = 28, std::uint32_t cols = 28) {
    std::vector<std::uint8_t> bytes;
    put(bytes, 0x803);
    put(bytes, count);
    put(bytes, rows);
    put(bytes, cols);
    bytes.resize(bytes.size() + std::size_t{count} * rows * cols, 128);
    return bytes;
  }
  static std::vector<std::uint8_t> labels(std::vector<std::uint8_t> values) {
    std::vector<std::uint8_t> bytes;
    put(bytes, 0x801);
    put(bytes, static_cast<std::uint32_t>(values.size()));
    bytes.insert(bytes.end(), values.begin(), values.end());
    return bytes;
  }

  std::filesystem::path dir_;
};

TEST_F(Files, WellFormedFilesAreRead) {
  const Split split = load_split(gzip("i.gz", images(3)), gzip("l.gz", labels({0, 9, 4})));
  EXPECT_EQ(split.size(), 3);
  EXPECT_EQ(split.images.shape(), (distribute::Shape{3, 784}));
  EXPECT_EQ(split.labels.to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 9, 4}));
  EXPECT_FLOAT_EQ(split.images.to_vector<float>()[100], 128.0f / 255.0f);
}

TEST_F(Files, AMissingFileNamesItselfAndThePackage) {
  const std::filesystem::path missing = dir_ / "nowhere.gz";
  expect_error<InvalidArgumentError>([&] { read_gzip(missing); }, {missing.string(), "dataset-fashion-mnist"});
}

TEST_F(Files, AFileThatIsNotGzipIsRejected) {
  const std::filesystem::path path = plain("raw", images(1));
  expect_error<InvalidArgumentError>([&] { load_split(path, gzip("l.gz", labels({1}))); },
                                     {path.string(), "not a gzip file"});
}

TEST_F(Files, AGzipStreamCutShortIsDataLoss) {
  const std::filesystem::path whole = gzip("whole.gz", images(20));
  const auto size = std::filesystem::file_size(whole);
  std::vector<std::uint8_t> bytes(size);
  std::FILE* file = std::fopen(whole.c_str(), "rb");
  ASSERT_EQ(std::fread(bytes.data(), 1, bytes.size(), file), bytes.size());
  std::fclose(file);
  bytes.resize(bytes.size() / 2);
  const std::filesystem::path cut = plain("cut.gz", bytes);
  expect_error<DataLossError>([&] { read_gzip(cut); }, {cut.string(), "corrupt"});
}

TEST_F(Files, AFileShorterThanItsHeaderSaysIsDataLoss) {
  std::vector<std::uint8_t> bytes = images(10);
  bytes.resize(bytes.size() - 784 * 5);
  const std::filesystem::path path = gzip("short.gz", bytes);
  expect_error<DataLossError>([&] { load_split(path, gzip("l.gz", labels(std::vector<std::uint8_t>(10, 1)))); },
                              {path.string(), "announces 7840 bytes", "truncated"});
}

TEST_F(Files, SwappedFilesHaveTheWrongMagicNumber) {
  const std::filesystem::path image_path = gzip("i.gz", images(2));
  const std::filesystem::path label_path = gzip("l.gz", labels({1, 2}));
  expect_error<InvalidArgumentError>([&] { load_split(label_path, image_path); },
                                     {label_path.string(), "magic number 0x00000801", "0x00000803"});
}

TEST_F(Files, ImagesOfAnotherSizeAreRejected) {
  const std::filesystem::path path = gzip("i.gz", images(2, 32, 32));
  expect_error<InvalidArgumentError>([&] { load_split(path, gzip("l.gz", labels({1, 2}))); },
                                     {path.string(), "32x32", "28x28"});
}

TEST_F(Files, ImagesAndLabelsMustBeAsMany) {
  const std::filesystem::path image_path = gzip("i.gz", images(3));
  const std::filesystem::path label_path = gzip("l.gz", labels({1, 2}));
  expect_error<InvalidArgumentError>([&] { load_split(image_path, label_path); }, {"3 images", "2 labels"});
}

TEST_F(Files, ALabelOutsideTheTenClassesIsRejected) {
  const std::filesystem::path label_path = gzip("l.gz", labels({1, 12}));
  expect_error<InvalidArgumentError>([&] { load_split(gzip("i.gz", images(2)), label_path); },
                                     {label_path.string(), "label 12 of example 1"});
}

// The lines of a text file.
std::vector<std::string> lines_of(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void write_lines(const std::filesystem::path& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const std::string& line : lines) out << line << "\n";
}

// Epoch k's stats: loss 1/k, accuracy 0.8, 1000 samples/s, collectives a quarter, input an eighth.
EpochStats epoch_stats(int k) {
  return {.epoch = k, .samples = 2000, .seconds = 2, .train_loss = 1.0 / k, .test_accuracy = 0.8,
          .collective_share = 0.25, .input_share = 0.125};
}

TEST_F(Files, MetricsOfANewRunAreTheHeaderAndARowPerEpoch) {
  const std::filesystem::path path = dir_ / "metrics.csv";
  write_lines(path, {MetricsCsv::kHeader, "1,9,9,9,9,9,9"});  // an earlier run's, replaced
  MetricsCsv metrics(path, 0);
  EXPECT_EQ(lines_of(path), std::vector<std::string>{MetricsCsv::kHeader});
  metrics.write(epoch_stats(1));
  metrics.write(epoch_stats(2));
  const std::vector<std::string> expected = {
      "epoch,train_loss,test_accuracy,samples_per_second,collective_share,input_share,seconds",
      "1,1,0.8,1000,0.25,0.125,2", "2,0.5,0.8,1000,0.25,0.125,2"};
  EXPECT_EQ(lines_of(path), expected);
}

TEST_F(Files, AResumedRunKeepsTheCheckpointsEpochsAndDropsLaterOnes) {
  const std::filesystem::path path = dir_ / "metrics.csv";
  write_lines(path, {MetricsCsv::kHeader, "1,9,9,9,9,9,9", "2,8,8,8,8,8,8", "3,7,7,7,7,7,7"});
  MetricsCsv metrics(path, 2);
  metrics.write(epoch_stats(3));
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{MetricsCsv::kHeader, "1,9,9,9,9,9,9", "2,8,8,8,8,8,8",
                                                      "3,0.333333,0.8,1000,0.25,0.125,2"}));
}

TEST_F(Files, AResumedRunWithoutMetricsStartsTheFile) {
  const std::filesystem::path path = dir_ / "metrics.csv";
  MetricsCsv metrics(path, 2);
  metrics.write(epoch_stats(3));
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{MetricsCsv::kHeader, "3,0.333333,0.8,1000,0.25,0.125,2"}));
}

TEST_F(Files, AResumedRunLeavesAFileOfAnotherKindAlone) {
  const std::filesystem::path path = dir_ / "notes.csv";
  write_lines(path, {"name,value", "a,1"});
  expect_error<InvalidArgumentError>([&] { MetricsCsv(path, 1); },
                                     {path.string(), "\"name,value\" is not the header"});
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{"name,value", "a,1"}));
  write_lines(path, {MetricsCsv::kHeader, "one,1,1,1,1,1,1"});
  expect_error<InvalidArgumentError>([&] { MetricsCsv(path, 1); },
                                     {path.string(), "line 2", "does not start with an epoch"});
}

TEST_F(Files, AMetricsFileThatCannotBeWrittenNamesItself) {
  const std::filesystem::path path = dir_ / "no_such_folder" / "metrics.csv";
  expect_error<InvalidArgumentError>([&] { MetricsCsv(path, 0); },
                                     {path.string(), "cannot open it for writing", "No such file or directory"});
}

TEST(Dataset, TheInstalledFilesHoldSixtyAndTenThousandBalancedImages) {
  REQUIRE_FASHION_MNIST();
  const FashionMnist data = load(kDataDir);
  EXPECT_EQ(data.train.size(), 60000);
  EXPECT_EQ(data.test.size(), 10000);
  std::vector<int> per_class(kClasses);
  for (std::int32_t label : data.train.labels.to_vector<std::int32_t>()) ++per_class[static_cast<std::size_t>(label)];
  EXPECT_EQ(per_class, std::vector<int>(kClasses, 6000));
  const auto pixels = data.test.images.flat<float>();
  EXPECT_EQ(pixels.minCoeff(), 0.0f);
  EXPECT_EQ(pixels.maxCoeff(), 1.0f);
}

// The first 2,000 training images and the whole test split, read once for every training test.
const FashionMnist& slice() {
  static const FashionMnist data = load(kDataDir, 2000);
  return data;
}

std::vector<std::string> cpus(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return devices;
}

std::vector<std::vector<float>> weights_of(const Trainer& trainer) {
  std::vector<std::vector<float>> weights;
  for (const Variable& v : trainer.model().trainable_variables()) weights.push_back(v.component(0).to_vector<float>());
  return weights;
}

TEST(Training, TwoReplicasLearnFromASliceInOneEpoch) {
  REQUIRE_FASHION_MNIST();
  MirroredStrategy strategy(cpus(2));
  Trainer trainer(strategy, slice(), {});
  const double before = trainer.evaluate();
  std::vector<double> step_losses;  // each step's mean loss over its batch
  double seen_loss = 0;
  std::int64_t seen_samples = 0;
  const EpochStats stats = trainer.train_epoch([&](const StepProgress& p) {
    const double total = p.mean_loss * static_cast<double>(p.samples);
    step_losses.push_back((total - seen_loss) / static_cast<double>(p.samples - seen_samples));
    seen_loss = total;
    seen_samples = p.samples;
  });
  ASSERT_EQ(step_losses.size(), 16u);  // 2,000 images in batches of 128
  EXPECT_EQ(stats.samples, 2000);
  EXPECT_EQ(trainer.epochs_done(), 1);
  // The first step's loss is about ln(10) = 2.3, ten classes equally likely; it falls steadily.
  EXPECT_GT(step_losses.front(), 2.0);
  EXPECT_LT(step_losses.back(), 0.5 * step_losses.front());
  EXPECT_LT(stats.train_loss, step_losses.front());
  EXPECT_LT(before, 0.3);
  EXPECT_GT(stats.test_accuracy, 0.6);  // chance is 0.1
  EXPECT_EQ(stats.test_accuracy, trainer.evaluate());
  EXPECT_GT(stats.collective_share, 0.0);
  EXPECT_LT(stats.collective_share + stats.input_share, 1.0);
}

TEST(Training, OneThreeAndFourReplicasReachTheSameWeights) {
  REQUIRE_FASHION_MNIST();
  const TrainerOptions options{.optimizer = "sgd", .learning_rate = 0.05};
  MirroredStrategy one(cpus(1));
  Trainer reference(one, slice(), options);
  reference.train_epoch();
  const std::vector<std::vector<float>> expected = weights_of(reference);
  for (const int n : {3, 4}) {
    MirroredStrategy strategy(cpus(n));
    Trainer trainer(strategy, slice(), options);
    trainer.train_epoch();
    const std::vector<std::vector<float>> actual = weights_of(trainer);
    for (std::size_t v = 0; v < expected.size(); ++v) {
      float worst = 0;
      for (std::size_t i = 0; i < expected[v].size(); ++i) worst = std::max(worst, std::fabs(actual[v][i] - expected[v][i]));
      EXPECT_LT(worst, 1e-5f) << n << " replicas, variable " << v;
    }
    // Every replica holds the same copy.
    for (const Variable& variable : trainer.model().trainable_variables()) {
      for (int r = 1; r < n; ++r) EXPECT_EQ(variable.component(r).to_vector<float>(), variable.component(0).to_vector<float>());
    }
  }
}

TEST(Training, AResumedRunContinuesAsIfItHadNeverStopped) {
  REQUIRE_FASHION_MNIST();
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("fashion_mnist_test." + std::to_string(::getpid()) + ".safetensors");
  MirroredStrategy strategy(cpus(2));
  Trainer straight(strategy, slice(), {});
  straight.train_epoch();
  straight.train_epoch();

  {
    MirroredStrategy first(cpus(2));
    Trainer stopped(first, slice(), {});
    stopped.train_epoch();
    stopped.save(path);
  }
  MirroredStrategy second(cpus(2));
  Trainer resumed(second, slice(), {});
  resumed.restore(path);
  std::filesystem::remove(path);
  EXPECT_EQ(resumed.epochs_done(), 1);
  resumed.train_epoch();
  EXPECT_EQ(resumed.epochs_done(), 2);
  EXPECT_EQ(weights_of(resumed), weights_of(straight));
}

TEST(Training, ResumingWithoutACheckpointNamesTheFile) {
  REQUIRE_FASHION_MNIST();
  MirroredStrategy strategy(cpus(2));
  Trainer trainer(strategy, slice(), {});
  const std::filesystem::path missing = std::filesystem::temp_directory_path() / "no_such_checkpoint.safetensors";
  expect_error<InvalidArgumentError>([&] { trainer.restore(missing); }, {missing.string()});
}

// With --overlap each gradient joins a bucket as the backward pass makes it; the buckets are
// summed by collectives of their own, but the sums and so the weights are those of the one
// all-reduce. 4 KiB buckets cut the default model's gradients into four collectives.
TEST(Training, OverlappedBucketsReachTheWeightsOfOneAllReduce) {
  REQUIRE_FASHION_MNIST();
  for (const char* optimizer : {"adam", "sgd"}) {
    for (const bool sharded : {false, true}) {
      SCOPED_TRACE(std::string(optimizer) + (sharded ? ", state in shards" : ", whole state"));
      const TrainerOptions options{.optimizer = optimizer, .learning_rate = 0.01, .shard_optimizer_state = sharded};
      MirroredStrategy one_collective(cpus(2));
      Trainer reference(one_collective, slice(), options);
      reference.train_epoch({}, 4);
      TrainerOptions overlapped = options;
      overlapped.overlap = true;
      overlapped.bucket_bytes = 4 << 10;
      MirroredStrategy buckets(cpus(2));
      Trainer trainer(buckets, slice(), overlapped);
      trainer.train_epoch({}, 4);
      EXPECT_EQ(weights_of(trainer), weights_of(reference));
      for (const Variable& variable : trainer.model().trainable_variables()) {
        EXPECT_EQ(variable.component(1).to_vector<float>(), variable.component(0).to_vector<float>());
      }
    }
  }
}

// The backward pass hands each gradient on as soon as it is made, the last layer's first: when the
// last layer's arrive, the first layer's gradient still holds the previous batch's.
TEST(Model, TheBackwardPassHandsOnEachGradientAsItIsMade) {
  REQUIRE_FASHION_MNIST();
  const Mlp model(1, {32, 16});
  Workspace workspace;
  const Split& train = slice().train;
  forward_backward(model, train.images.slice(0, 64), train.labels.slice(0, 64), 64, workspace);
  const std::vector<float> first_layer_before = workspace.gradients[0].to_vector<float>();

  std::vector<std::string> order;
  std::vector<bool> first_layer_untouched;
  std::vector<std::vector<float>> handed_on;
  const auto on_gradient = [&](const Variable& v, const Tensor& gradient) {
    order.push_back(v.name());
    first_layer_untouched.push_back(workspace.gradients[0].to_vector<float>() == first_layer_before);
    handed_on.push_back(gradient.to_vector<float>());
  };
  forward_backward(model, train.images.slice(64, 128), train.labels.slice(64, 128), 64, workspace, on_gradient);
  EXPECT_EQ(order, (std::vector<std::string>{"dense_3/kernel", "dense_3/bias", "dense_2/kernel", "dense_2/bias",
                                             "dense_1/kernel", "dense_1/bias"}));
  EXPECT_EQ(first_layer_untouched, (std::vector<bool>{true, true, true, true, false, false}));
  // What each call handed on is the pass's gradient of that variable.
  const std::vector<std::size_t> index = {4, 5, 2, 3, 0, 1};
  for (std::size_t k = 0; k < handed_on.size(); ++k) {
    EXPECT_EQ(handed_on[k], workspace.gradients[index[k]].to_vector<float>()) << order[k];
  }
}

TEST(Training, HiddenWidthsShapeTheModel) {
  REQUIRE_FASHION_MNIST();
  MirroredStrategy strategy(cpus(2));
  Trainer trainer(strategy, slice(), {.hidden = {48, 24, 12}});
  EXPECT_EQ(trainer.model().widths, (std::vector<std::int64_t>{784, 48, 24, 12, 10}));
  std::vector<distribute::Shape> shapes;
  for (const Variable& v : trainer.model().trainable_variables()) shapes.push_back(v.shape());
  EXPECT_EQ(shapes, (std::vector<distribute::Shape>{{784, 48}, {48}, {48, 24}, {24}, {24, 12}, {12}, {12, 10}, {10}}));
  const std::vector<std::vector<float>> before = weights_of(trainer);
  const EpochStats stats = trainer.train_epoch();
  EXPECT_NE(weights_of(trainer), before);
  EXPECT_GT(stats.test_accuracy, 0.3);  // chance is 0.1
}

TEST(Training, HiddenWidthsMustBeAtLeastOneEachAtLeastOne) {
  MirroredStrategy strategy(cpus(1));
  const FashionMnist none;
  expect_error<InvalidArgumentError>([&] { Trainer(strategy, none, {.hidden = {}}); },
                                     {"hidden layer widths []", "at least one"});
  expect_error<InvalidArgumentError>([&] { Trainer(strategy, none, {.hidden = {64, 0}}); },
                                     {"hidden layer widths [64, 0]", "each at least 1"});
}

TEST(Training, ACheckpointRestoresOnlyIntoTheWidthsItWasSavedWith) {
  REQUIRE_FASHION_MNIST();
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("fashion_mnist_test." + std::to_string(::getpid()) + ".widths");
  MirroredStrategy strategy(cpus(2));
  Trainer saved(strategy, slice(), {});
  saved.save(path);
  Trainer other(strategy, slice(), {.hidden = {64, 32}});
  const std::vector<std::vector<float>> before = weights_of(other);
  expect_error<InvalidArgumentError>([&] { other.restore(path); },
                                     {"'dense_1/kernel': shape (784, 256) in the file, (784, 64) in the checkpoint"});
  Trainer deeper(strategy, slice(), {.hidden = {256, 128, 64}});
  expect_error<InvalidArgumentError>([&] { deeper.restore(path); }, {"'dense_4/kernel': in the checkpoint, not in the file"});
  std::filesystem::remove(path);
  EXPECT_EQ(weights_of(other), before);
}

// Compression applies to what crosses between workers: in one process the sums stay exact float32.
TEST(Training, CompressionLeavesTheSumsOfOneProcessExact) {
  REQUIRE_FASHION_MNIST();
  for (const bool overlap : {false, true}) {
    for (const bool sharded : {false, true}) {
      SCOPED_TRACE(std::string(overlap ? "overlap" : "one collective") + (sharded ? ", state in shards" : ""));
      TrainerOptions options{.shard_optimizer_state = sharded, .overlap = overlap, .bucket_bytes = 4 << 10};
      MirroredStrategy exact(cpus(2));
      Trainer reference(exact, slice(), options);
      reference.train_epoch({}, 2);
      for (const distribute::Compression compression :
           {distribute::Compression::kBfloat16, distribute::Compression::kFloat16}) {
        options.compression = compression;
        MirroredStrategy compressed(cpus(2));
        Trainer trainer(compressed, slice(), options);
        trainer.train_epoch({}, 2);
        EXPECT_EQ(weights_of(trainer), weights_of(reference)) << distribute::compression_name(compression);
      }
    }
  }
}

// On GPUs the passes run there (cuBLAS and the example's kernels) and compute what the host's do,
// up to float32 rounding in another order: one epoch of SGD on the slice from the same start
// reaches the host's weights and accuracy. Each test skips without a GPU.
void expect_gpus_train_as_the_host(const std::vector<std::string>& gpus) {
  const TrainerOptions options{.optimizer = "sgd", .learning_rate = 0.05};
  MirroredStrategy cpu(cpus(static_cast<int>(gpus.size())));
  Trainer reference(cpu, slice(), options);
  const EpochStats expected = reference.train_epoch();
  MirroredStrategy gpu(gpus);
  Trainer trainer(gpu, slice(), options);
  const EpochStats stats = trainer.train_epoch();
  for (std::size_t r = 0; r < gpus.size(); ++r) {
    EXPECT_EQ(trainer.model().kernels[0].component(static_cast<int>(r)).device(),
              distribute::Device::gpu(static_cast<int>(r)));
  }
  const std::vector<std::vector<float>> want = weights_of(reference);
  const std::vector<std::vector<float>> got = weights_of(trainer);
  for (std::size_t v = 0; v < want.size(); ++v) {
    float worst = 0;
    for (std::size_t i = 0; i < want[v].size(); ++i) worst = std::max(worst, std::fabs(got[v][i] - want[v][i]));
    EXPECT_LT(worst, 1e-4f) << "variable " << v;
  }
  EXPECT_NEAR(stats.train_loss, expected.train_loss, 1e-4);
  EXPECT_NEAR(stats.test_accuracy, expected.test_accuracy, 0.003);
  EXPECT_GT(stats.test_accuracy, 0.6);
  std::printf("%s: loss %.6f (host %.6f), test accuracy %.4f (host %.4f)\n", gpu.name().c_str(), stats.train_loss,
              expected.train_loss, stats.test_accuracy, expected.test_accuracy);
}

#define REQUIRE_GPU()                                                                            \
  if (distribute::num_physical_gpus() == 0) {                                                   \
    GTEST_SKIP() << "no GPU is visible: " << distribute::gpu_unavailable_reason();               \
  }

TEST(TrainingOnGpu, OneGpuReachesTheHostsWeights) {
  REQUIRE_FASHION_MNIST();
  REQUIRE_GPU();
  expect_gpus_train_as_the_host({"GPU:0"});
}

TEST(TrainingOnGpu, TwoLogicalGpusReachTwoHostReplicasWeights) {
  REQUIRE_FASHION_MNIST();
  REQUIRE_GPU();
  distribute::set_logical_device_configuration(0, {{}, {}});
  expect_gpus_train_as_the_host({"GPU:0", "GPU:1"});
}

TEST(Training, AnUnknownOptimizerIsRejected) {
  MirroredStrategy strategy(cpus(1));
  const FashionMnist none;
  expect_error<InvalidArgumentError>([&] { Trainer(strategy, none, {.optimizer = "rmsprop"}); },
                                     {"rmsprop", "\"adam\" and \"sgd\""});
}

}  // namespace
}  // namespace fashion_mnist
