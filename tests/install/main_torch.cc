// The torch consumer of the install test, built when the install has the torch component
// (find_package(distribute CONFIG REQUIRED COMPONENTS torch)): two replicas sum LibTorch tensors
// in place through from_torch, and a replicated torch::nn::Linear takes a step on both clones.
#include <cstdio>

#include <distribute/distribute.h>
#include <distribute/torch/torch.h>
#include <torch/torch.h>

int main() {
  distribute::MirroredStrategy strategy({"CPU:0", "CPU:1"});
  std::vector<at::Tensor> values{at::ones({2}), at::ones({2})};
  strategy.run([&] {
    distribute::ReplicaContext* ctx = distribute::get_replica_context();
    const auto replica = static_cast<std::size_t>(ctx->replica_id_in_sync_group());
    distribute::Tensor shared = distribute::from_torch(values[replica]);
    ctx->all_reduce_in_place(distribute::ReduceOp::kSum, shared);
  });
  for (const at::Tensor& v : values) {
    if (!at::equal(v, at::full({2}, 2.0f))) {
      std::fprintf(stderr, "consumer_torch: all_reduce gave %g, expected 2\n", v[0].item<double>());
      return 1;
    }
  }
  std::printf("consumer_torch: all_reduce SUM of LibTorch tensors over 2 replicas = 2\n");

  distribute::StrategyScope scope = strategy.scope();
  distribute::ReplicatedModule<torch::nn::LinearImpl> model(
      [] { return std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(2, 1).bias(false)); });
  model.variable("weight").assign(distribute::Tensor::from_vector<float>({0, 0}, distribute::Shape{1, 2}));
  distribute::optimizers::SGD sgd(1.0);
  strategy.run([&] {
    const float r = static_cast<float>(distribute::get_replica_context()->replica_id_in_sync_group());
    auto buckets = sgd.gradient_buckets();
    // d/dw of w . x is x: replica 0's x is (1, 1), replica 1's (2, 2); the step subtracts the sum.
    model.backward(model->forward(torch::full({1, 2}, r + 1)).sum(), buckets);
    sgd.apply_gradients(buckets);
  });
  for (int c = 0; c < 2; ++c) {
    if (!torch::equal(model.clone(c)->weight, torch::full({1, 2}, -3.0f))) {
      std::fprintf(stderr, "consumer_torch: clone %d's weight is %g, expected -3\n", c,
                   model.clone(c)->weight[0][0].item<double>());
      return 1;
    }
  }
  std::printf("consumer_torch: a replicated Linear stepped both clones to -3\n");
  return 0;
}
