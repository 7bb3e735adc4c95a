// ReplicatedModule under MultiWorkerMirroredStrategy: `mpirun -np W torch_multi_worker_test
// --local_replicas=L` (2x1, 2x2). Every worker builds its clones with values of its own; the chief's
// replica 0 values win, training reaches the weights of the same module trained in one process on
// the global batch, and every replica of every worker holds the same bits after every step.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/mpi/multi_worker_mirrored_strategy.h"
#include "distribute/torch/torch.h"
#include "testing/torch_net.h"

namespace distribute {
namespace {

int g_local_replicas = 1;

MultiWorkerMirroredStrategy& strategy() {
  static MultiWorkerMirroredStrategy* s = [] {
    MultiWorkerMirroredStrategyOptions options;
    for (int l = 0; l < g_local_replicas; ++l) options.local_devices.push_back("CPU:" + std::to_string(l));
    options.communication.timeout = std::chrono::seconds(20);
    return new MultiWorkerMirroredStrategy(options);
  }();
  return *s;
}

// Every replica's copy of the module's parameters, flattened, gathered on every replica: each
// replica checks that all copies are the same bits.
void expect_every_replica_identical(ReplicatedModule<testing::Net>& model, const std::string& when) {
  const std::vector<int> differing = strategy().run([&] {
    std::vector<at::Tensor> flat;
    for (const at::Tensor& p : model.local()->parameters()) flat.push_back(p.detach().reshape({1, -1}));
    const Tensor mine = from_torch(::torch::cat(flat, 1).contiguous());
    const at::Tensor all = to_torch(get_replica_context()->all_gather(mine, 0));
    int count = 0;
    for (int r = 1; r < all.size(0); ++r) count += ::torch::equal(all[r], all[0]) ? 0 : 1;
    return count;
  }).values();
  for (int count : differing) EXPECT_EQ(count, 0) << "replicas whose parameters differ " << when;
}

class TorchMultiWorker : public ::testing::Test {
 protected:
  int worker() const { return strategy().extended().worker_id(); }
  int replicas() const { return strategy().num_replicas_in_sync(); }
};

TEST_F(TorchMultiWorker, ReachesTheWeightsOfOneProcessOnTheGlobalBatch) {
  constexpr int kSteps = 4;
  const std::shared_ptr<testing::Net> alone = testing::train_alone(kSteps);
  MultiWorkerMirroredStrategy& s = strategy();
  StrategyScope scope = s.scope();
  int made = 0;
  // Clone 0 of the chief is seeded as the reference; every other clone differently.
  ReplicatedModule<testing::Net> model([&] {
    ::torch::manual_seed(7 + 100 * worker() + made++);
    return std::make_shared<testing::Net>();
  });
  expect_every_replica_identical(model, "after replication");
  optimizers::SGD sgd(testing::kLearningRate);
  const int rows = testing::kGlobalBatch / replicas();
  for (int step = 0; step < kSteps; ++step) {
    s.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      auto buckets = sgd.gradient_buckets({.bucket_bytes = 64});
      model.backward(testing::share_of_loss(*model.local(), r * rows, rows), buckets);
      sgd.apply_gradients(buckets);
    });
    expect_every_replica_identical(model, "after step " + std::to_string(step));
  }
  const auto reference = alone->named_parameters(true);
  for (int c = 0; c < model.num_clones(); ++c) {
    for (const auto& item : model.clone(c)->named_parameters(true)) {
      EXPECT_TRUE(::torch::allclose(item.value(), reference[item.key()], 1e-5, 1e-6))
          << item.key() << " of worker " << worker() << " clone " << c;
    }
  }
}

TEST_F(TorchMultiWorker, ATorchOptimOptimizerKeepsEveryWorkerEqual) {
  constexpr int kSteps = 3;
  const std::shared_ptr<testing::Net> alone = testing::train_alone(kSteps);
  MultiWorkerMirroredStrategy& s = strategy();
  StrategyScope scope = s.scope();
  ReplicatedModule<testing::Net> model([] { return testing::seeded_net(); });
  std::vector<std::unique_ptr<::torch::optim::SGD>> optimizers;
  for (int c = 0; c < model.num_clones(); ++c) {
    optimizers.push_back(std::make_unique<::torch::optim::SGD>(model.clone(c)->parameters(), testing::kLearningRate));
  }
  const int rows = testing::kGlobalBatch / replicas();
  for (int step = 0; step < kSteps; ++step) {
    s.run([&] {
      ReplicaContext* ctx = get_replica_context();
      model.backward(testing::share_of_loss(*model.local(), ctx->replica_id_in_sync_group() * rows, rows));
      optimizers[static_cast<std::size_t>(ctx->local_replica_id())]->step();
    });
  }
  expect_every_replica_identical(model, "after training");
  const auto reference = alone->named_parameters(true);
  for (const auto& item : model.clone(0)->named_parameters(true)) {
    EXPECT_TRUE(::torch::allclose(item.value(), reference[item.key()], 1e-5, 1e-6)) << item.key();
  }
}

}  // namespace
}  // namespace distribute

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--local_replicas=", 0) == 0) distribute::g_local_replicas = std::stoi(arg.substr(17));
  }
  distribute::strategy();
  return RUN_ALL_TESTS();
}
