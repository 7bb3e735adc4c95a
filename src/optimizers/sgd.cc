// SGD: plain, momentum and Nesterov steps as Keras defines them.
#include "distribute/optimizers/sgd.h"

#include "device/gpu_runtime.h"
#include "optimizers/update_loop.h"

namespace distribute::optimizers {
namespace {

std::vector<std::string> sgd_slots(double momentum) {
  DISTRIBUTE_CHECK(momentum >= 0.0 && momentum <= 1.0, InvalidArgumentError, "SGD: momentum is ", momentum,
                   "; it must be in [0, 1]");
  if (momentum == 0.0) return {};
  return {"momentum"};
}

}  // namespace

SGD::SGD(const SGDOptions& options, const OptimizerOptions& optimizer_options)
    : Optimizer("SGD", options.learning_rate, sgd_slots(options.momentum), optimizer_options),
      momentum_(options.momentum),
      nesterov_(options.nesterov) {}

SGD::SGD(double learning_rate, double momentum)
    : SGD(SGDOptions{.learning_rate = learning_rate, .momentum = momentum}) {}

void SGD::update_step(const Tensor& gradient, Tensor& variable, std::span<Tensor> slots, const Step&) const {
  if (variable.device().is_gpu()) {
    distribute::detail::gpu::sgd_step(variable.dtype(), variable.raw_data(), gradient.raw_data(),
                                      slots.empty() ? nullptr : slots[0].raw_data(), variable.num_elements(),
                                      learning_rate(), momentum_, nesterov_, variable.device());
    return;
  }
  detail::dispatch_floating(variable.dtype(), [&]<class T>(TypeTag<T>) {
    auto w = variable.flat<T>();
    const auto g = gradient.flat<T>();
    const T lr = static_cast<T>(learning_rate());
    if (slots.empty()) {
      w -= lr * g;
      return;
    }
    auto m = slots[0].flat<T>();
    const T mu = static_cast<T>(momentum_);
    detail::for_each_chunk(w.size(), [&](Eigen::Index i, Eigen::Index n) {
      m.segment(i, n) = mu * m.segment(i, n) - lr * g.segment(i, n);
      if (nesterov_) {
        w.segment(i, n) += mu * m.segment(i, n) - lr * g.segment(i, n);
      } else {
        w.segment(i, n) += m.segment(i, n);
      }
    });
  });
}

}  // namespace distribute::optimizers
