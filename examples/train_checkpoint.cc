// train_checkpoint: a training loop end to end, as tf.distribute shapes it. Replicas fit
// y = w * x + b to twelve points of y = 3x - 2. The variables and an SGD optimizer with momentum
// are created under strategy.scope(); in each step every replica takes its slice of the global
// batch, computes its loss and gradients with nn::compute_average_loss (which divides by the
// global batch, not the replica's), and apply_gradients sums the gradients across replicas in one
// all_reduce and updates every replica's copy of w and b. An on-read variable collects the loss:
// each replica writes its part, a cross-replica read sums them.
//
// After 30 steps on two replicas a Checkpoint saves the weights and the optimizer's state. A
// strategy with three replicas restores them into fresh variables and trains 20 more steps, as
// does the first one: both end at the same weights (up to the rounding of a sum over two or three
// replicas). Exits with status 1 if a value differs from the expected one.
//
// Expected output:
//   2 replicas, step 10: loss 0.5566, w 3.4625, b -1.7288
//   2 replicas, step 20: loss 0.1362, w 3.0756, b -2.3173
//   2 replicas, step 30: loss 0.0013, w 2.9803, b -2.0291
//   saved w, b, SGD/iterations, SGD/w/momentum, SGD/b/momentum
//   restored: MirroredVariable:{
//     0: <Variable 'w:0' shape=() dtype=float32, numpy=2.9803257>,
//     1: <Variable 'w/replica_1:0' shape=() dtype=float32, numpy=2.9803257>,
//     2: <Variable 'w/replica_2:0' shape=() dtype=float32, numpy=2.9803257>
//   }
//   3 replicas, step 40: loss 0.0017, w 3.0058, b -1.9608
//   3 replicas, step 50: loss 0.0001, w 2.9921, b -1.9998
//   2 replicas, step 50: loss 0.0001, w 2.9921, b -1.9998
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <distribute/distribute.h>

using namespace distribute;

namespace {

constexpr int kGlobalBatch = 12;

struct Model {
  Variable w{0.0f, {.name = "w"}};
  Variable b{0.0f, {.name = "b"}};
  Variable loss{0.0f, {.name = "loss",
                       .trainable = false,
                       .synchronization = VariableSynchronization::kOnRead,
                       .aggregation = VariableAggregation::kSum}};
  optimizers::SGD sgd{0.1, 0.8};
};

// Everything a model holds is created for the strategy whose scope is entered here.
std::unique_ptr<Model> make_model(Strategy& strategy) {
  StrategyScope scope = strategy.scope();
  auto model = std::make_unique<Model>();
  model->sgd.build({model->w, model->b});
  return model;
}

void train_step(Strategy& strategy, Model& model) {
  strategy.run([&] {
    const ReplicaContext& ctx = *get_replica_context();
    const int per_replica = kGlobalBatch / ctx.num_replicas_in_sync();
    const float w = model.w.value().item<float>();
    const float b = model.b.value().item<float>();
    std::vector<float> squared;
    std::vector<float> dw;
    std::vector<float> db;
    for (int i = 0; i < per_replica; ++i) {
      const float x = 0.25f * static_cast<float>(ctx.replica_id_in_sync_group() * per_replica + i) - 1.5f;
      const float error = w * x + b - (3 * x - 2);
      squared.push_back(error * error);
      dw.push_back(2 * error * x);
      db.push_back(2 * error);
    }
    model.loss.assign(nn::compute_average_loss(Tensor::from_vector(squared)));
    model.sgd.apply_gradients({{nn::compute_average_loss(Tensor::from_vector(dw)), model.w},
                               {nn::compute_average_loss(Tensor::from_vector(db)), model.b}});
  });
}

struct Report {
  float loss;
  float w;
  float b;
};

Report report(Strategy& strategy, const Model& model, int step) {
  const Report r{model.loss.value().item<float>(), model.w.value().item<float>(), model.b.value().item<float>()};
  std::printf("%d replicas, step %d: loss %.4f, w %.4f, b %.4f\n", strategy.num_replicas_in_sync(), step, r.loss, r.w,
              r.b);
  return r;
}

Checkpoint checkpoint_of(Model& model) {
  std::vector<std::pair<std::string, Variable>> named = {{"w", model.w}, {"b", model.b}};
  for (const Variable& v : model.sgd.variables()) named.emplace_back(v.name(), v);
  return Checkpoint(std::move(named));
}

bool near(float actual, float expected) { return std::fabs(actual - expected) < 1e-4f; }

}  // namespace

int main() {
  bool ok = true;
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("train_checkpoint." + std::to_string(::getpid()) + ".safetensors");

  MirroredStrategy two({"CPU:0", "CPU:1"});
  std::unique_ptr<Model> model = make_model(two);
  const Report expected[] = {{0.5566f, 3.4625f, -1.7288f}, {0.1362f, 3.0756f, -2.3173f}, {0.0013f, 2.9803f, -2.0291f}};
  for (int step = 1; step <= 30; ++step) {
    train_step(two, *model);
    if (step % 10 == 0) {
      const Report r = report(two, *model, step);
      const Report& e = expected[step / 10 - 1];
      ok = ok && near(r.loss, e.loss) && near(r.w, e.w) && near(r.b, e.b);
    }
  }
  const Checkpoint saved = checkpoint_of(*model);
  saved.save(path);
  std::printf("saved");
  for (std::size_t i = 0; i < saved.variables().size(); ++i) {
    std::printf("%s %s", i == 0 ? "" : ",", saved.variables()[i].first.c_str());
  }
  std::printf("\n");

  MirroredStrategy three({"CPU:0", "CPU:1", "CPU:2"});
  std::unique_ptr<Model> restored = make_model(three);
  Checkpoint loaded = checkpoint_of(*restored);
  loaded.restore(path);
  std::filesystem::remove(path);
  std::cout << "restored: " << restored->w << "\n";
  ok = ok && restored->sgd.iterations().value().item<std::int64_t>() == 30;

  Report last_three{};
  Report last_two{};
  for (int step = 31; step <= 50; ++step) {
    train_step(three, *restored);
    train_step(two, *model);
    if (step % 10 == 0) last_three = report(three, *restored, step);
  }
  last_two = report(two, *model, 50);
  ok = ok && near(last_three.w, last_two.w) && near(last_three.b, last_two.b) && near(last_three.w, 2.9921f) &&
       near(last_three.b, -1.9998f);
  if (!ok) std::printf("UNEXPECTED VALUES\n");
  return ok ? 0 : 1;
}
