// Adam, as tf.keras.optimizers.Adam defines it (without amsgrad). Per step t (from 1), for
// gradient g, with slots "m" and "v" starting at 0:
//   alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
//   m += (g - m) * (1 - beta_1)
//   v += (g^2 - v) * (1 - beta_2)
//   w -= alpha * m / (sqrt(v) + epsilon)
// The update of each component is one pass over its memory. See optimizer.h for the distributed
// behaviour.
#pragma once

#include "distribute/optimizers/optimizer.h"

namespace distribute::optimizers {

// Adam's settings as named fields: Adam(AdamOptions{.learning_rate = 1e-3, .beta_2 = 0.99}).
struct AdamOptions {
  double learning_rate = 0.001;  // finite and >= 0
  double beta_1 = 0.9;           // in [0, 1)
  double beta_2 = 0.999;         // in [0, 1)
  double epsilon = 1e-7;         // finite and >= 0
};

class Adam final : public Optimizer {
 public:
  // InvalidArgumentError unless 0 <= beta_1 < 1, 0 <= beta_2 < 1, epsilon is finite and >= 0,
  // and learning_rate is finite and >= 0.
  explicit Adam(const AdamOptions& options, const OptimizerOptions& optimizer_options = {});
  explicit Adam(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999, double epsilon = 1e-7);

  double beta_1() const { return beta_1_; }
  double beta_2() const { return beta_2_; }
  double epsilon() const { return epsilon_; }

 protected:
  void update_step(const Tensor& gradient, Tensor& variable, std::span<Tensor> slots,
                   const Step& step) const override;

 private:
  double beta_1_;
  double beta_2_;
  double epsilon_;
};

}  // namespace distribute::optimizers
