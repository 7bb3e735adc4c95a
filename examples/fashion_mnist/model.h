// The model of the Fashion-MNIST example: a multilayer perceptron, 784-256-128-10 by default, with
// ReLU and a softmax cross-entropy loss, its weights held in distribute::Variables and its
// gradients computed by hand with Eigen. Nothing here knows about replicas: a replica calls
// forward_backward on its part of the global batch, and the trainer (trainer.h) all-reduces the
// gradients it produces.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <Eigen/Core>

#include "distribute/distribute.h"

namespace fashion_mnist {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The weights: a kernel (inputs x outputs) and a bias per dense layer. Construct it under the scope
// of the strategy that trains it (the variables are mirrored on its replicas). Kernels start
// Glorot-uniform from `seed`, biases at zero, so every run with one seed starts from the same
// weights whatever the number of replicas.
struct Mlp {
  // `hidden`: the widths of the hidden layers, at least one, each at least 1 (InvalidArgumentError
  // otherwise).
  Mlp(std::uint64_t seed, const std::vector<std::int64_t>& hidden);

  // kernel_1, bias_1, kernel_2, ...: the order of workspace.gradients after forward_backward.
  std::vector<distribute::Variable> trainable_variables() const;
  int layers() const { return static_cast<int>(kernels.size()); }

  // 784, the hidden widths, 10: layer l takes widths[l] inputs to widths[l + 1] outputs.
  std::vector<std::int64_t> widths;
  std::vector<distribute::Variable> kernels;
  std::vector<distribute::Variable> biases;
};

// A replica's scratch space: activations, their gradients, and one gradient tensor per trainable
// variable. Kept across steps, so that a step allocates nothing once the batch size is seen.
struct GpuPasses;  // the same on a GPU, with the replica's cuBLAS handle (model_gpu.cc)
struct Workspace {
  std::vector<Matrix> outputs;  // pre-activation outputs of each layer
  std::vector<Matrix> deltas;   // the loss's gradient with respect to them
  std::vector<Matrix> activations;
  std::vector<distribute::Tensor> gradients;
  distribute::Tensor per_example_loss;
  std::shared_ptr<GpuPasses> gpu;  // made by the replica's first pass on a GPU
};

// Given each variable's gradient as soon as the backward pass has made it (on a GPU: enqueued it on
// the replica's stream), so that its sum across replicas can start while the layers below are
// still to go.
using GradientSink = std::function<void(const distribute::Variable& variable, const distribute::Tensor& gradient)>;

// The forward and backward pass of one replica's batch (images float32 [n, 784], labels int32 [n],
// n may be 0), on the host or, in a build with CUDA, on the replica's GPU where the batch is. The
// gradients, written to workspace.gradients, are those of the loss summed over the replica's
// examples divided by global_batch_size; summed across replicas they are the gradients of the
// global batch's mean loss. `on_gradient`, when given, gets each of them as the backward pass makes
// it: the last layer first, its kernel's before its bias's. Returns nn::compute_average_loss of the
// per-example losses: the replica's share of that mean.
distribute::Tensor forward_backward(const Mlp& model, const distribute::Tensor& images,
                                    const distribute::Tensor& labels, std::int64_t global_batch_size,
                                    Workspace& workspace, const GradientSink& on_gradient = {});

// The number of examples of the batch whose highest logit is their label.
std::int64_t count_correct(const Mlp& model, const distribute::Tensor& images, const distribute::Tensor& labels,
                           Workspace& workspace);

}  // namespace fashion_mnist
