// SGD: gradient descent with optional momentum, as tf.keras.optimizers.SGD defines it. Per step,
// for gradient g and learning rate lr:
//   momentum == 0:  w -= lr * g                         (no slot)
//   momentum  > 0:  m = momentum * m - lr * g           (slot "momentum", starts at 0)
//                   w += m                              (nesterov: w += momentum * m - lr * g)
// The update of each component is one pass over its memory. See optimizer.h for the distributed
// behaviour.
#pragma once

#include "distribute/optimizers/optimizer.h"

namespace distribute::optimizers {

// SGD's settings as named fields, so that a call site reads
// SGD(SGDOptions{.momentum = 0.9, .nesterov = true}) rather than a bare `true`.
struct SGDOptions {
  double learning_rate = 0.01;  // finite and >= 0
  double momentum = 0.0;        // in [0, 1]; 0 keeps no slot
  // Nesterov momentum: the step looks ahead along the updated momentum. Without momentum the
  // step is plain SGD either way.
  bool nesterov = false;
};

class SGD final : public Optimizer {
 public:
  // InvalidArgumentError unless 0 <= momentum <= 1 and learning_rate is finite and >= 0.
  explicit SGD(const SGDOptions& options, const OptimizerOptions& optimizer_options = {});
  explicit SGD(double learning_rate = 0.01, double momentum = 0.0);

  double momentum() const { return momentum_; }
  bool nesterov() const { return nesterov_; }

 protected:
  void update_step(const Tensor& gradient, Tensor& variable, std::span<Tensor> slots,
                   const Step& step) const override;

 private:
  double momentum_;
  bool nesterov_;
};

}  // namespace distribute::optimizers
