// ReplicatedModule: a LibTorch module trained on 2 and 4 replicas reaches the weights of the same
// module trained in one process on the global batch (and the same bits on every repeat), every
// clone stays identical after every step, the clones' tensors are the mirrored variables' memory,
// buffers are averaged, checkpoints load by state_dict name into a plain LibTorch module, and
// misuse ends in a typed error naming the replica and the parameter.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/torch/torch.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"
#include "testing/temp_files.h"
#include "testing/torch_net.h"

namespace distribute {
namespace {

using testing::expect_error;

using testing::kFeatures;
using testing::kGlobalBatch;
using testing::kLearningRate;
using testing::Net;
using testing::inputs;
using testing::seeded_net;
using testing::share_of_loss;
using testing::train_alone;

// Every clone's parameters and buffers equal clone 0's, bit for bit.
void expect_clones_identical(const ReplicatedModule<Net>& model, const std::string& when) {
  const auto first = model.clone(0)->named_parameters(true);
  for (int c = 1; c < model.num_clones(); ++c) {
    for (const auto& item : model.clone(c)->named_parameters(true)) {
      EXPECT_TRUE(::torch::equal(item.value(), first[item.key()])) << item.key() << " of clone " << c << " " << when;
    }
    const auto buffers = model.clone(0)->named_buffers(true);
    for (const auto& item : model.clone(c)->named_buffers(true)) {
      EXPECT_TRUE(::torch::equal(item.value(), buffers[item.key()])) << item.key() << " of clone " << c << " " << when;
    }
  }
}

// Trains a replicated Net for `steps` with the library's SGD and overlapped buckets; returns clone
// 0's parameters, by name.
using OptimizerFactory = std::function<std::unique_ptr<optimizers::Optimizer>()>;

std::unique_ptr<optimizers::Optimizer> plain_sgd() { return std::make_unique<optimizers::SGD>(kLearningRate); }

std::vector<std::pair<std::string, at::Tensor>> train_replicated(int replicas, int steps, bool with_norm = false,
                                                                 const OptimizerFactory& make_optimizer = plain_sgd) {
  MirroredStrategy strategy(testing::cpu_devices(replicas));
  StrategyScope scope = strategy.scope();
  ReplicatedModule<Net> model([&] { return seeded_net(with_norm); });
  const std::unique_ptr<optimizers::Optimizer> optimizer = make_optimizer();
  optimizers::Optimizer& sgd = *optimizer;
  const int rows = kGlobalBatch / replicas;
  for (int step = 0; step < steps; ++step) {
    strategy.run([&] {
      ReplicaContext* ctx = get_replica_context();
      // Small buckets: several collectives per step, overlapping the backward pass.
      auto buckets = sgd.gradient_buckets({.bucket_bytes = 64});
      model.backward(share_of_loss(*model.local(), ctx->replica_id_in_sync_group() * rows, rows), buckets);
      sgd.apply_gradients(buckets);
    });
    expect_clones_identical(model, "after step " + std::to_string(step));
  }
  std::vector<std::pair<std::string, at::Tensor>> result;
  for (const auto& item : model.clone(0)->named_parameters(true)) result.emplace_back(item.key(), item.value().clone());
  for (const auto& item : model.clone(0)->named_buffers(true)) result.emplace_back(item.key(), item.value().clone());
  return result;
}

TEST(ReplicatedModule, ClonesViewTheirMirroredVariablesNamedByTheStateDict) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  StrategyScope scope = strategy.scope();
  int made = 0;
  ReplicatedModule<Net> model([&] {
    ::torch::manual_seed(100 + made++);  // different values per clone: replica 0's win
    return std::make_shared<Net>(true);
  });
  EXPECT_EQ(made, 2);
  EXPECT_EQ(model.num_clones(), 2);
  std::vector<std::string> names;
  for (const auto& [name, variable] : model.named_variables()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "norm.weight", "norm.bias", "fc2.weight",
                                             "fc2.bias", "norm.running_mean", "norm.running_var",
                                             "norm.num_batches_tracked"}));
  ::torch::manual_seed(100);
  const Net replica_zero(true);
  for (int c = 0; c < 2; ++c) {
    for (const auto& item : model.clone(c)->named_parameters(true)) {
      const Variable& variable = model.variable(item.key());
      EXPECT_EQ(item.value().data_ptr(), variable.component(c).raw_data()) << item.key();
      EXPECT_TRUE(::torch::equal(item.value(), replica_zero.named_parameters(true)[item.key()])) << item.key();
      EXPECT_TRUE(variable.trainable());
      EXPECT_EQ(variable.name(), item.key());
    }
    for (const auto& item : model.clone(c)->named_buffers(true)) {
      EXPECT_EQ(item.value().data_ptr(), model.variable(item.key()).component(c).raw_data()) << item.key();
    }
  }
  EXPECT_EQ(model.trainable_variables().size(), 6u);
  EXPECT_EQ(model.variable("norm.running_mean").aggregation(), VariableAggregation::kMean);
  EXPECT_EQ(model.variable("norm.num_batches_tracked").aggregation(), VariableAggregation::kOnlyFirstReplica);
  EXPECT_FALSE(model.variable("norm.running_var").trainable());
  // Outside run, local() is clone 0.
  EXPECT_EQ(model.local(), model.clone(0));
  // An update of a variable is what every clone computes with.
  model.variable("fc2.bias").assign(Tensor::from_vector<float>({1, 2, 3}, Shape{3}));
  EXPECT_TRUE(::torch::equal(model.clone(1)->fc2->bias, ::torch::tensor({1.0f, 2.0f, 3.0f})));
}

class ReplicatedTraining : public ::testing::TestWithParam<int> {};

TEST_P(ReplicatedTraining, ReachesTheWeightsOfOneProcessOnTheGlobalBatch) {
  constexpr int kSteps = 5;
  const std::shared_ptr<Net> alone = train_alone(kSteps);
  const auto replicated = train_replicated(GetParam(), kSteps);
  const auto reference = alone->named_parameters(true);
  for (const auto& [name, value] : replicated) {
    EXPECT_TRUE(::torch::allclose(value, reference[name], /*rtol=*/1e-5, /*atol=*/1e-6))
        << name << ": " << (value - reference[name]).abs().max().item<float>();
  }
  // A repeat is the same bits.
  const auto again = train_replicated(GetParam(), kSteps);
  for (std::size_t i = 0; i < replicated.size(); ++i) {
    EXPECT_TRUE(::torch::equal(replicated[i].second, again[i].second)) << replicated[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, ReplicatedTraining, ::testing::Values(2, 4));

TEST(ReplicatedModule, AdamWithStateInShardsTakesWholeAdamsSteps) {
  constexpr int kSteps = 3;
  const auto whole = train_replicated(4, kSteps, false, [] { return std::make_unique<optimizers::Adam>(0.01); });
  const auto sharded = train_replicated(4, kSteps, false, [] {
    return std::make_unique<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.01},
                                              optimizers::OptimizerOptions{.shard_state = true});
  });
  const auto initial = seeded_net()->named_parameters(true);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    EXPECT_TRUE(::torch::equal(whole[i].second, sharded[i].second)) << whole[i].first;
    EXPECT_FALSE(::torch::equal(whole[i].second, initial[whole[i].first])) << whole[i].first << " did not move";
  }
}

TEST(ReplicatedModule, ATorchOptimOptimizerStepsOnTheSummedGradients) {
  constexpr int kSteps = 3;
  const std::shared_ptr<Net> alone = train_alone(kSteps);
  MirroredStrategy strategy(testing::cpu_devices(2));
  StrategyScope scope = strategy.scope();
  ReplicatedModule<Net> model([] { return seeded_net(); });
  std::vector<std::unique_ptr<::torch::optim::SGD>> optimizers;
  for (int c = 0; c < model.num_clones(); ++c) {
    optimizers.push_back(std::make_unique<::torch::optim::SGD>(model.clone(c)->parameters(), kLearningRate));
  }
  for (int step = 0; step < kSteps; ++step) {
    strategy.run([&] {
      ReplicaContext* ctx = get_replica_context();
      const int r = ctx->replica_id_in_sync_group();
      model.backward(share_of_loss(*model.local(), r * 4, 4));
      optimizers[static_cast<std::size_t>(ctx->local_replica_id())]->step();
    });
    expect_clones_identical(model, "after step " + std::to_string(step));
  }
  const auto reference = alone->named_parameters(true);
  for (const auto& item : model.clone(1)->named_parameters(true)) {
    EXPECT_TRUE(::torch::allclose(item.value(), reference[item.key()], 1e-5, 1e-6)) << item.key();
    // The optimizer wrote the variables' memory.
    EXPECT_TRUE(::torch::equal(to_torch(model.variable(item.key()).component(0)), item.value())) << item.key();
  }
}

TEST(ReplicatedModule, BufferStatisticsAreAveragedAcrossReplicas) {
  // One step: batch norm normalises each replica's slice by its own statistics, so later steps
  // start from other weights than one process's.
  constexpr int kSteps = 1;
  const std::shared_ptr<Net> alone = train_alone(kSteps, /*with_norm=*/true);
  const auto replicated = train_replicated(2, kSteps, /*with_norm=*/true);
  const auto buffers = alone->named_buffers(true);
  for (const auto& [name, value] : replicated) {
    if (name == "norm.running_mean") {
      // The mean of the replicas' batch means is the global batch's mean.
      EXPECT_TRUE(::torch::allclose(value, buffers[name], 1e-5, 1e-6)) << value << buffers[name];
    } else if (name == "norm.num_batches_tracked") {
      EXPECT_EQ(value.item<std::int64_t>(), kSteps);
    }
  }
}

TEST(ReplicatedModule, ACheckpointLoadsByStateDictNameIntoAPlainModule) {
  const std::filesystem::path path = testing::temp_path("replicated", ".safetensors");
  std::vector<std::pair<std::string, at::Tensor>> saved;
  {
    MirroredStrategy strategy(testing::cpu_devices(2));
    StrategyScope scope = strategy.scope();
    ReplicatedModule<Net> model([] { return seeded_net(true); });
    optimizers::SGD sgd(kLearningRate);
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      auto buckets = sgd.gradient_buckets();
      model.backward(share_of_loss(*model.local(), r * 4, 4), buckets);
      sgd.apply_gradients(buckets);
    });
    Checkpoint(model.named_variables()).save(path);
    for (const auto& [name, variable] : model.named_variables()) saved.emplace_back(name, to_torch(variable.value()).clone());
  }
  // Into LibTorch's own module, by name, outside any strategy.
  ::torch::manual_seed(99);
  Net plain(true);
  load_state_dict(plain, path);
  const auto parameters = plain.named_parameters(true);
  const auto buffers = plain.named_buffers(true);
  for (const auto& [name, value] : saved) {
    const at::Tensor loaded = parameters.contains(name) ? parameters[name] : buffers[name];
    EXPECT_TRUE(::torch::equal(loaded, value)) << name;
  }
  // And back: a plain module's state_dict restores into a replicated one on 4 replicas.
  ::torch::manual_seed(5);
  Net other(true);
  const std::filesystem::path other_path = testing::temp_path("plain", ".safetensors");
  save_state_dict(other, other_path);
  MirroredStrategy strategy(testing::cpu_devices(4));
  StrategyScope scope = strategy.scope();
  ReplicatedModule<Net> model([] { return seeded_net(true); });
  std::vector<std::pair<std::string, Variable>> named = model.named_variables();
  Checkpoint(named).restore(other_path);
  for (int c = 0; c < 4; ++c) {
    EXPECT_TRUE(::torch::equal(model.clone(c)->fc1->weight, other.fc1->weight)) << c;
    EXPECT_TRUE(::torch::equal(model.clone(c)->norm->running_var, other.norm->running_var)) << c;
  }
  std::filesystem::remove(path);
  std::filesystem::remove(other_path);
}

// A Net on two replicas, and one training step whose loss each replica takes from `loss_of`.
class ReplicatedModuleErrors : public ::testing::Test {
 protected:
  ReplicatedModuleErrors() {
    StrategyScope scope = strategy_.scope();
    model_.emplace([] { return seeded_net(); });
    sgd_ = std::make_unique<optimizers::SGD>(kLearningRate);
  }

  void step_with_buckets(const std::function<at::Tensor(int replica)>& loss_of) {
    strategy_.run([&] {
      auto buckets = sgd_->gradient_buckets();
      model_->backward(loss_of(get_replica_context()->replica_id_in_sync_group()), buckets);
      sgd_->apply_gradients(buckets);
    });
  }

  MirroredStrategy strategy_{testing::cpu_devices(2)};
  std::optional<ReplicatedModule<Net>> model_;
  std::unique_ptr<optimizers::SGD> sgd_;
};

TEST_F(ReplicatedModuleErrors, ABackwardPassThroughAnotherReplicasCloneNamesBoth) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the misuse this test makes, two replicas' threads in one clone's autograd graph, races inside "
                  "LibTorch (which is not built for ThreadSanitizer) before the library can refuse it";
#endif
  // Replica 0 computes with replica 1's clone.
  expect_error<FailedPreconditionError>(
      [&] { step_with_buckets([&](int r) { return share_of_loss(*model_->clone(1), r * 4, 4); }); },
      {"backward pass of replica 0", "parameter 'fc2.", "local replica 1's clone", "model.local()"});
}

TEST_F(ReplicatedModuleErrors, AParameterReplacedAfterReplicationIsNamed) {
  model_->clone(1)->fc1->weight.set_data(::torch::zeros({8, kFeatures}));
  expect_error<FailedPreconditionError>(
      [&] { step_with_buckets([&](int r) { return share_of_loss(*model_->local(), r * 4, 4); }); },
      {"replica 1's parameter 'fc1.weight'", "replaced after replication"});
}

TEST_F(ReplicatedModuleErrors, AModuleGivenAnotherParameterAfterReplicationIsNamed) {
  model_->clone(0)->register_parameter("extra", ::torch::zeros({1}));
  expect_error<FailedPreconditionError>(
      [&] {
        strategy_.run([&] {
          const int r = get_replica_context()->replica_id_in_sync_group();
          model_->backward(share_of_loss(*model_->local(), r * 4, 4));
        });
      },
      {"replica 0's clone changed after replication", "extra"});
}

TEST_F(ReplicatedModuleErrors, AParameterWithoutAGradientOnOneReplicaIsNamed) {
  // Replica 1's loss leaves fc2 out.
  expect_error<InvalidArgumentError>(
      [&] {
        step_with_buckets([&](int r) {
          Net& net = *model_->local();
          return r == 0 ? share_of_loss(net, 0, 4) : net.fc1->forward(inputs()).sum();
        });
      },
      {"on replica 1", "parameter 'fc2.bias', 'fc2.weight' got no gradient"});
}

TEST(ReplicatedModuleMisuse, MisplacedCallsSayWhereTheyBelong) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  StrategyScope scope = strategy.scope();
  expect_error<InvalidArgumentError>([] { ReplicatedModule<Net> model([] { return std::shared_ptr<Net>(); }); },
                                     {"null module", "local replica 0"});
  const std::shared_ptr<Net> shared = seeded_net();
  expect_error<InvalidArgumentError>([&] { ReplicatedModule<Net> model([&] { return shared; }); },
                                     {"same module twice", "local replica 1"});
  int calls = 0;
  expect_error<InvalidArgumentError>(
      [&] { ReplicatedModule<Net> model([&] { return std::make_shared<Net>(calls++ == 1); }); },
      {"local replica 1", "differs from local replica 0's"});
  expect_error<InvalidArgumentError>(
      [] { ReplicatedModule<Net> model([] { return seeded_net(); }, {.intra_op_threads = -2}); },
      {"intra_op_threads is -2"});
  ReplicatedModule<Net> model([] { return seeded_net(); });
  expect_error<InvalidArgumentError>([&] { model.variable("fc3.weight"); }, {"no parameter or buffer 'fc3.weight'",
                                                                             "fc1.weight, fc1.bias"});
  expect_error<OutOfRangeError>([&] { model.clone(2); }, {"local replica 2 is not in [0, 2)"});
  expect_error<FailedPreconditionError>([&] { model.backward(::torch::zeros({})); },
                                        {"outside a replica's fn", "strategy.run"});
  expect_error<FailedPreconditionError>(
      [&] { strategy.run([] { ReplicatedModule<Net> inside([] { return seeded_net(); }); }); },
      {"ReplicatedModule", "inside a replica's fn", "cross-replica context"});
}

TEST(ReplicatedModuleMisuse, AnotherStrategysReplicaIsRefused) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  std::optional<ReplicatedModule<Net>> model;
  {
    StrategyScope scope = strategy.scope();
    model.emplace([] { return seeded_net(); });
  }
  MirroredStrategy other(testing::cpu_devices(2));
  expect_error<FailedPreconditionError>([&] { other.run([&] { model->local(); }); },
                                        {"ReplicatedModule.local", "called in a replica of MirroredStrategy",
                                         "not of the strategy the module was replicated for"});
}

TEST(ReplicatedModule, TheDefaultThreadsShareTheCoresWithTheOtherWorkersOnTheMachine) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  StrategyScope scope = strategy.scope();
  // As mpirun -np 3 tells each worker on one machine.
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1), 0);
  ReplicatedModule<Net> model([] { return seeded_net(); });
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> threads(2);
  strategy.run([&] {
    model.local();
    threads[static_cast<std::size_t>(get_replica_context()->local_replica_id())] = at::get_num_threads();
  });
  EXPECT_EQ(threads, std::vector<int>(2, std::max(1, cores / 6)));
}

TEST(ReplicatedModule, EachReplicaThreadGetsItsShareOfTheCores) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  StrategyScope scope = strategy.scope();
  ReplicatedModule<Net> model([] { return seeded_net(); }, {.intra_op_threads = 3});
  std::vector<int> threads(2);
  strategy.run([&] {
    model.local();
    threads[static_cast<std::size_t>(get_replica_context()->local_replica_id())] = at::get_num_threads();
  });
  EXPECT_EQ(threads, (std::vector<int>{3, 3}));
}

// docs/torch.md's program: two replicas train a classifier; the loss falls and the clones stay equal.
struct GuideNet : ::torch::nn::Module {
  GuideNet() {
    fc1 = register_module("fc1", ::torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", ::torch::nn::Linear(8, 2));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2->forward(::torch::relu(fc1->forward(x))); }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

TEST(ReplicatedModule, TheGuidesProgramTrainsTwoEqualClones) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  StrategyScope scope = strategy.scope();
  ReplicatedModule<GuideNet> model([] { return std::make_shared<GuideNet>(); });
  optimizers::SGD sgd(0.1);
  const int global_batch = 16;
  ::torch::manual_seed(0);
  const at::Tensor x = ::torch::randn({global_batch, 4});
  const at::Tensor y = (x.sum(1) > 0).to(::torch::kLong);
  std::vector<float> losses;
  for (int step = 0; step < 100; ++step) {
    const PerReplica<float> replica_losses = strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      const at::Tensor mine = x.narrow(0, 8 * r, 8), labels = y.narrow(0, 8 * r, 8);
      at::Tensor loss = ::torch::nn::functional::cross_entropy(
                            model->forward(mine), labels,
                            ::torch::nn::functional::CrossEntropyFuncOptions().reduction(::torch::kSum)) /
                        global_batch;
      auto buckets = sgd.gradient_buckets();
      model.backward(loss, buckets);
      sgd.apply_gradients(buckets);
      return loss.item<float>();
    });
    losses.push_back(replica_losses[0] + replica_losses[1]);
  }
  EXPECT_LT(losses.back(), losses.front() / 2) << losses.front() << " -> " << losses.back();
  const std::filesystem::path path = testing::temp_path("net", ".safetensors");
  Checkpoint(model.named_variables()).save(path);
  EXPECT_TRUE(::torch::equal(model.clone(0)->fc1->weight, model.clone(1)->fc1->weight));
  GuideNet plain;
  load_state_dict(plain, path);
  EXPECT_TRUE(::torch::equal(plain.fc2->bias, model.clone(1)->fc2->bias));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace distribute
