// The LibTorch module the torch tests train: a small classifier (optionally with batch norm), a
// fixed global batch, each replica's share of its loss, and the same module trained in one process
// without the library, the reference a replicated module must reach.
#pragma once

#include <torch/torch.h>

#include <memory>

namespace distribute::testing {

constexpr int kGlobalBatch = 8;
constexpr int kFeatures = 6;
constexpr int kClasses = 3;
constexpr double kLearningRate = 0.1;

struct Net : ::torch::nn::Module {
  explicit Net(bool with_norm = false) {
    fc1 = register_module("fc1", ::torch::nn::Linear(kFeatures, 8));
    if (with_norm) norm = register_module("norm", ::torch::nn::BatchNorm1d(8));
    fc2 = register_module("fc2", ::torch::nn::Linear(8, kClasses));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = fc1->forward(x);
    if (!norm.is_empty()) h = norm->forward(h);
    return fc2->forward(::torch::tanh(h));
  }
  ::torch::nn::Linear fc1{nullptr};
  ::torch::nn::BatchNorm1d norm{nullptr};
  ::torch::nn::Linear fc2{nullptr};
};

// A fixed global batch and its targets.
inline at::Tensor inputs() {
  return ::torch::sin(::torch::arange(kGlobalBatch * kFeatures, ::torch::kFloat32).reshape({kGlobalBatch, kFeatures}));
}
inline at::Tensor targets() { return ::torch::arange(kGlobalBatch, ::torch::kLong).remainder(kClasses); }

// The loss of `net` on rows [begin, begin + rows) of the global batch, as that slice's share of the
// global batch's mean cross entropy.
inline at::Tensor share_of_loss(Net& net, int begin, int rows) {
  const at::Tensor x = inputs().narrow(0, begin, rows);
  const at::Tensor y = targets().narrow(0, begin, rows);
  return ::torch::nn::functional::cross_entropy(
             net.forward(x), y, ::torch::nn::functional::CrossEntropyFuncOptions().reduction(::torch::kSum)) /
         kGlobalBatch;
}

inline std::shared_ptr<Net> seeded_net(bool with_norm = false) {
  ::torch::manual_seed(7);
  return std::make_shared<Net>(with_norm);
}

// The same module trained in one process, without the library, on the whole batch.
inline std::shared_ptr<Net> train_alone(int steps, bool with_norm = false) {
  std::shared_ptr<Net> net = seeded_net(with_norm);
  ::torch::optim::SGD sgd(net->parameters(), kLearningRate);
  for (int step = 0; step < steps; ++step) {
    sgd.zero_grad();
    share_of_loss(*net, 0, kGlobalBatch).backward();
    sgd.step();
  }
  return net;
}

}  // namespace distribute::testing
