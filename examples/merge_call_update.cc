// merge_call_update: a training loop in the shape tf.distribute gives it. Two CPU replicas fit
// y = w * x (the data follow w = 2) by gradient descent on the mean squared error. Each step, every
// replica computes the gradient of its own half of the batch; merge_call pauses them, merge_fn
// averages the gradients with extended().reduce_to and applies them to the Mirrored weight with
// extended().update, and each replica resumes with its updated copy. Strategy::reduce then averages
// the per-replica losses. The numbers are exact in float32, so the check compares them exactly.
//
// Expected output:
//   step 0
//   gradients PerReplica:{
//     0: <Tensor: shape=(), dtype=float32, numpy=-10.0>,
//     1: <Tensor: shape=(), dtype=float32, numpy=-50.0>
//   }
//   mean loss <Tensor: shape=(), dtype=float32, numpy=30.0>
//   weight Mirrored:{
//     0: <Tensor: shape=(), dtype=float32, numpy=1.875>,
//     1: <Tensor: shape=(), dtype=float32, numpy=1.875>
//   }
//   step 1
//   gradients PerReplica:{
//     0: <Tensor: shape=(), dtype=float32, numpy=-0.625>,
//     1: <Tensor: shape=(), dtype=float32, numpy=-3.125>
//   }
//   mean loss <Tensor: shape=(), dtype=float32, numpy=0.1171875>
//   weight Mirrored:{
//     0: <Tensor: shape=(), dtype=float32, numpy=1.9921875>,
//     1: <Tensor: shape=(), dtype=float32, numpy=1.9921875>
//   }
//   step 2
//   gradients PerReplica:{
//     0: <Tensor: shape=(), dtype=float32, numpy=-0.0390625>,
//     1: <Tensor: shape=(), dtype=float32, numpy=-0.1953125>
//   }
//   mean loss <Tensor: shape=(), dtype=float32, numpy=0.00045776367>
//   weight Mirrored:{
//     0: <Tensor: shape=(), dtype=float32, numpy=1.9995117>,
//     1: <Tensor: shape=(), dtype=float32, numpy=1.9995117>
//   }

#include <iostream>
#include <optional>
#include <vector>

#include "distribute/distribute.h"

namespace {

using namespace distribute;

constexpr float kLearningRate = 0.0625f;

}  // namespace

int main() {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});

  // One copy of the weight on each replica's device, kept equal by the updates.
  std::vector<Tensor> copies;
  for (const Device& device : strategy.extended().worker_devices()) {
    copies.push_back(Tensor::zeros(DType::kFloat32, Shape{}, device));
  }
  Mirrored<Tensor> weight(std::move(copies));

  // The global batch x = [1, 2, 3, 4]: replica r holds [2r + 1, 2r + 2].
  auto batches = strategy.experimental_distribute_values_from_function([&](const ValueContext& ctx) {
    const float first = 2.0f * static_cast<float>(ctx.replica_id_in_sync_group()) + 1.0f;
    return Tensor::from_vector<float>({first, first + 1.0f}, Shape{2},
                                      strategy.extended().worker_devices()[static_cast<std::size_t>(ctx.replica_id_in_sync_group())]);
  });

  // Runs once per step, in cross-replica context, while every replica waits in merge_call.
  auto apply_gradients = [&](Strategy& s, const PerReplica<Tensor>& grads) {
    std::cout << "gradients " << grads << '\n';
    Tensor mean_grad = s.extended().reduce_to(ReduceOp::kMean, grads, Device::cpu());
    return s.extended().update(weight, [&](Tensor& var) {
      // In place, as tf's var.assign_sub: the replicas hold views of these components.
      var.flat<float>() -= kLearningRate * mean_grad.flat<float>();
      return var;
    });
  };

  auto step_fn = [&](const Tensor& w, const Tensor& x) {
    const auto xs = x.flat<float>();
    const Eigen::ArrayXf error = w.item<float>() * xs - 2.0f * xs;
    ReplicaContext& ctx = *get_replica_context();
    Tensor grad = Tensor::scalar((2.0f * error * xs).mean(), ctx.device());
    Tensor loss = Tensor::scalar(error.square().mean(), ctx.device());
    Tensor updated = ctx.merge_call(apply_gradients, grad);
    if (!updated.same_storage(w)) throw InternalError("merge_call returned another replica's weight");
    return loss;
  };

  const float expected_loss[] = {30.0f, 0.1171875f, 0.000457763671875f};
  const float expected_weight[] = {1.875f, 1.9921875f, 1.99951171875f};
  bool ok = true;
  for (int step = 0; step < 3; ++step) {
    std::cout << "step " << step << '\n';
    PerReplica<Tensor> losses = strategy.run(step_fn, weight, batches);
    Tensor mean_loss = strategy.reduce(ReduceOp::kMean, losses, std::nullopt);
    std::cout << "mean loss " << mean_loss << "\nweight " << weight << '\n';
    ok = ok && mean_loss.item<float>() == expected_loss[step];
    for (const Tensor& w : weight.values()) ok = ok && w.item<float>() == expected_weight[step];
  }
  if (!ok) {
    std::cerr << "the losses or weights differ from the expected ones\n";
    return 1;
  }
  return 0;
}
