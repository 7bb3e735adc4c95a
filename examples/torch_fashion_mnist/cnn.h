// The LibTorch example's model, a plain torch::nn::Module that the example program and
// bench/torch_train_bench share: the pixels standardized, 5x5 convolutions of 16 and 32 channels,
// each followed by 2x2 max pooling and ReLU (28x28 -> 24x24 -> 12x12 -> 8x8 -> 4x4), a dense layer
// of 128 and the 10 classes' logits.
#pragma once

#include <torch/torch.h>

namespace torch_fashion_mnist {

struct Cnn : torch::nn::Module {
  static constexpr const char* kDescription = "CNN conv5x5/16-pool-conv5x5/32-pool-128-10";
  // The mean and standard deviation of Fashion-MNIST's training pixels (in [0, 1]).
  static constexpr double kPixelMean = 0.2860;
  static constexpr double kPixelStd = 0.3530;

  Cnn() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 4 * 4, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }

  // images [n, 1, 28, 28] -> logits [n, 10]. Pooling before ReLU gives the same values and
  // gradients as after (ReLU keeps the order of its inputs), with ReLU on a quarter of them.
  at::Tensor forward(const at::Tensor& images) {
    at::Tensor x = torch::relu(torch::max_pool2d(conv1->forward((images - kPixelMean) / kPixelStd), 2));
    x = torch::relu(torch::max_pool2d(conv2->forward(x), 2));
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
};

}  // namespace torch_fashion_mnist
