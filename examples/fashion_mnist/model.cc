// The MLP's passes with Eigen, reading the replica's own copies of the weights in place.
#include "model.h"

#if FASHION_MNIST_WITH_GPU
#include "model_gpu.h"
#endif

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "idx.h"

namespace fashion_mnist {
namespace {

using distribute::DType;
using distribute::Shape;
using distribute::Tensor;
using distribute::Variable;

// Glorot (Xavier) uniform, Keras's default for dense kernels: U(-l, l), l = sqrt(6 / (in + out)).
Tensor glorot_uniform(std::int64_t inputs, std::int64_t outputs, std::mt19937_64& random) {
  const float limit = std::sqrt(6.0f / static_cast<float>(inputs + outputs));
  std::uniform_real_distribution<float> uniform(-limit, limit);
  std::vector<float> values(static_cast<std::size_t>(inputs * outputs));
  for (float& v : values) v = uniform(random);
  return Tensor::from_vector(values, Shape{inputs, outputs});
}

// Runs the layers on `images`; afterwards workspace.outputs.back() holds the logits.
void forward(const Mlp& model, const Tensor& images, Workspace& workspace) {
  const int layers = model.layers();
  workspace.outputs.resize(static_cast<std::size_t>(layers));
  workspace.deltas.resize(static_cast<std::size_t>(layers));
  workspace.activations.resize(static_cast<std::size_t>(layers - 1));
  for (int l = 0; l < layers; ++l) {
    const Tensor kernel = model.kernels[l].value();
    const Tensor bias = model.biases[l].value();
    Matrix& out = workspace.outputs[l];
    if (l == 0) {
      out.noalias() = images.matrix<float>() * kernel.matrix<float>();
    } else {
      out.noalias() = workspace.activations[l - 1] * kernel.matrix<float>();
    }
    out.rowwise() += bias.flat<float>().matrix().transpose();
    if (l + 1 < layers) workspace.activations[l] = out.cwiseMax(0.0f);
  }
}

}  // namespace

Mlp::Mlp(std::uint64_t seed, const std::vector<std::int64_t>& hidden) {
  if (hidden.empty() || std::any_of(hidden.begin(), hidden.end(), [](std::int64_t w) { return w < 1; })) {
    throw distribute::InvalidArgumentError(absl::StrCat("hidden layer widths [", absl::StrJoin(hidden, ", "),
                                                        "]: give at least one, each at least 1"));
  }
  widths.push_back(kPixels);
  widths.insert(widths.end(), hidden.begin(), hidden.end());
  widths.push_back(kClasses);
  std::mt19937_64 random(seed);
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    const std::string layer = "dense_" + std::to_string(l + 1);
    kernels.emplace_back(glorot_uniform(widths[l], widths[l + 1], random),
                         distribute::VariableOptions{.name = layer + "/kernel"});
    biases.emplace_back(Tensor::zeros(DType::kFloat32, Shape{widths[l + 1]}),
                        distribute::VariableOptions{.name = layer + "/bias"});
  }
}

std::vector<Variable> Mlp::trainable_variables() const {
  std::vector<Variable> variables;
  for (int l = 0; l < layers(); ++l) {
    variables.push_back(kernels[l]);
    variables.push_back(biases[l]);
  }
  return variables;
}

Tensor forward_backward(const Mlp& model, const Tensor& images, const Tensor& labels, std::int64_t global_batch_size,
                        Workspace& workspace, const GradientSink& on_gradient) {
#if FASHION_MNIST_WITH_GPU
  if (images.device().is_gpu()) {
    return forward_backward_on_gpu(model, images, labels, global_batch_size, workspace, on_gradient);
  }
#endif
  const std::int64_t n = labels.num_elements();
  forward(model, images, workspace);

  // Softmax cross-entropy, computed stably from the logits' row maxima. The loss's gradient with
  // respect to the logits is softmax - one_hot(label), over the global batch.
  const Matrix& logits = workspace.outputs.back();
  Matrix& delta = workspace.deltas.back();
  const Eigen::VectorXf max = logits.rowwise().maxCoeff();
  delta = (logits.colwise() - max).array().exp().matrix();
  const Eigen::VectorXf sum = delta.rowwise().sum();
  if (!workspace.per_example_loss.defined() || workspace.per_example_loss.num_elements() != n) {
    workspace.per_example_loss = Tensor::empty(DType::kFloat32, Shape{n});
  }
  float* loss = workspace.per_example_loss.data<float>();
  const std::int32_t* label = labels.data<std::int32_t>();
  const float scale = 1.0f / static_cast<float>(global_batch_size);
  for (std::int64_t i = 0; i < n; ++i) {
    loss[i] = std::log(sum(i)) + max(i) - logits(i, label[i]);
    delta.row(i) /= sum(i);
    delta(i, label[i]) -= 1.0f;
  }
  delta *= scale;

  if (workspace.gradients.empty()) {
    for (const Variable& v : model.trainable_variables()) workspace.gradients.push_back(Tensor::empty(v.dtype(), v.shape()));
  }
  for (int l = model.layers() - 1; l >= 0; --l) {
    const Matrix& d = workspace.deltas[l];
    Tensor& kernel_gradient = workspace.gradients[2 * l];
    Tensor& bias_gradient = workspace.gradients[2 * l + 1];
    if (l == 0) {
      kernel_gradient.matrix<float>().noalias() = images.matrix<float>().transpose() * d;
    } else {
      kernel_gradient.matrix<float>().noalias() = workspace.activations[l - 1].transpose() * d;
    }
    if (on_gradient) on_gradient(model.kernels[l], kernel_gradient);
    bias_gradient.flat<float>() = d.colwise().sum().transpose().array();
    if (on_gradient) on_gradient(model.biases[l], bias_gradient);
    if (l > 0) {
      const Tensor kernel = model.kernels[l].value();
      workspace.deltas[l - 1] = (d * kernel.matrix<float>().transpose()).cwiseProduct(
          (workspace.outputs[l - 1].array() > 0.0f).cast<float>().matrix());
    }
  }
  return distribute::nn::compute_average_loss(workspace.per_example_loss, global_batch_size);
}

std::int64_t count_correct(const Mlp& model, const Tensor& images, const Tensor& labels, Workspace& workspace) {
#if FASHION_MNIST_WITH_GPU
  if (images.device().is_gpu()) return count_correct_on_gpu(model, images, labels, workspace);
#endif
  forward(model, images, workspace);
  const Matrix& logits = workspace.outputs.back();
  const std::int32_t* label = labels.data<std::int32_t>();
  std::int64_t correct = 0;
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    Eigen::Index predicted = 0;
    logits.row(i).maxCoeff(&predicted);
    correct += predicted == label[i] ? 1 : 0;
  }
  return correct;
}

}  // namespace fashion_mnist
