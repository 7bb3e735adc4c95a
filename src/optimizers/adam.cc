// Adam: Keras's Adam step.
#include "distribute/optimizers/adam.h"

#include <cmath>

#include "optimizers/update_loop.h"

namespace distribute::optimizers {
namespace {

double checked_beta(const char* name, double beta) {
  DISTRIBUTE_CHECK(beta >= 0.0 && beta < 1.0, InvalidArgumentError, "Adam: ", name, " is ", beta,
                   "; it must be in [0, 1)");
  return beta;
}

}  // namespace

Adam::Adam(double learning_rate, double beta_1, double beta_2, double epsilon)
    : Optimizer("Adam", learning_rate, {"m", "v"}),
      beta_1_(checked_beta("beta_1", beta_1)),
      beta_2_(checked_beta("beta_2", beta_2)),
      epsilon_(epsilon) {
  DISTRIBUTE_CHECK(epsilon >= 0.0, InvalidArgumentError, "Adam: epsilon is ", epsilon, "; it must be >= 0");
}

void Adam::apply_gradients(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) { apply(grads_and_vars); }

void Adam::update_step(const Tensor& gradient, Tensor& variable, std::span<Tensor> slots, std::int64_t step) const {
  const auto t = static_cast<double>(step);
  const double alpha = learning_rate() * std::sqrt(1.0 - std::pow(beta_2_, t)) / (1.0 - std::pow(beta_1_, t));
  internal::dispatch_floating(variable.dtype(), [&]<class T>(TypeTag<T>) {
    auto w = variable.flat<T>();
    const auto g = gradient.flat<T>();
    auto m = slots[0].flat<T>();
    auto v = slots[1].flat<T>();
    const T a = static_cast<T>(alpha);
    const T one_minus_b1 = static_cast<T>(1.0 - beta_1_);
    const T one_minus_b2 = static_cast<T>(1.0 - beta_2_);
    const T eps = static_cast<T>(epsilon_);
    internal::for_each_chunk(w.size(), [&](Eigen::Index i, Eigen::Index n) {
      m.segment(i, n) += (g.segment(i, n) - m.segment(i, n)) * one_minus_b1;
      v.segment(i, n) += (g.segment(i, n).square() - v.segment(i, n)) * one_minus_b2;
      w.segment(i, n) -= (m.segment(i, n) * a) / (v.segment(i, n).sqrt() + eps);
    });
  });
}

}  // namespace distribute::optimizers
