// Adam: Keras's Adam step.
#include "distribute/optimizers/adam.h"

#include <cmath>

#include "base/multiversion.h"
#include "device/gpu_runtime.h"
#include "optimizers/update_loop.h"

namespace distribute::optimizers {
namespace {

double checked_beta(const char* name, double beta) {
  DISTRIBUTE_CHECK(beta >= 0.0 && beta < 1.0, InvalidArgumentError, "Adam: ", name, " is ", beta,
                   "; it must be in [0, 1)");
  return beta;
}

// One Adam step over n elements, in the order of Keras's formulas. A plain loop rather than Eigen
// expressions so that it is compiled for AVX2 too: the square root and the division bound it, and
// AVX2 does twice as many of each per instruction as SSE2. (This file is built with
// -fno-math-errno, without which GCC does not vectorise std::sqrt.) The results are the same
// either way: each operation is IEEE-rounded, with no contraction into fused multiply-adds.
template <class T>
DISTRIBUTE_MULTIVERSION void adam_step(T* __restrict w, const T* __restrict g, T* __restrict m, T* __restrict v,
                                       std::int64_t n, T alpha, T one_minus_b1, T one_minus_b2, T eps) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    const T mi = m[i] + (gi - m[i]) * one_minus_b1;
    const T vi = v[i] + (gi * gi - v[i]) * one_minus_b2;
    m[i] = mi;
    v[i] = vi;
    w[i] -= (mi * alpha) / (std::sqrt(vi) + eps);
  }
}

}  // namespace

Adam::Adam(const AdamOptions& options, const OptimizerOptions& optimizer_options)
    : Optimizer("Adam", options.learning_rate, {"m", "v"}, optimizer_options),
      beta_1_(checked_beta("beta_1", options.beta_1)),
      beta_2_(checked_beta("beta_2", options.beta_2)),
      epsilon_(options.epsilon) {
  DISTRIBUTE_CHECK(std::isfinite(epsilon_) && epsilon_ >= 0.0, InvalidArgumentError, "Adam: epsilon is ", epsilon_,
                   "; it must be >= 0 and finite");
}

Adam::Adam(double learning_rate, double beta_1, double beta_2, double epsilon)
    : Adam(AdamOptions{.learning_rate = learning_rate, .beta_1 = beta_1, .beta_2 = beta_2, .epsilon = epsilon}) {}

void Adam::update_step(const Tensor& gradient, Tensor& variable, std::span<Tensor> slots, const Step& step) const {
  if (variable.device().is_gpu()) {
    distribute::detail::gpu::adam_step(variable.dtype(), variable.raw_data(), gradient.raw_data(),
                                       slots[0].raw_data(), slots[1].raw_data(), variable.num_elements(),
                                       step.steps_before_on_device, learning_rate(), beta_1_, beta_2_, epsilon_,
                                       variable.device());
    return;
  }
  const auto t = static_cast<double>(step.number);
  const double alpha = learning_rate() * std::sqrt(1.0 - std::pow(beta_2_, t)) / (1.0 - std::pow(beta_1_, t));
  detail::dispatch_floating(variable.dtype(), [&]<class T>(TypeTag<T>) {
    adam_step<T>(variable.data<T>(), gradient.data<T>(), slots[0].data<T>(), slots[1].data<T>(),
                 variable.num_elements(), static_cast<T>(alpha), static_cast<T>(1.0 - beta_1_),
                 static_cast<T>(1.0 - beta_2_), static_cast<T>(epsilon_));
  });
}

}  // namespace distribute::optimizers
