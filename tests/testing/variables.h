// Shared helpers for the tests of variables, optimizers and checkpoints: variables created under a
// strategy's scope.
#pragma once

#include <utility>

#include "distribute/distribute.h"

namespace distribute::testing {

// A variable created for `strategy`, as if under its scope.
inline Variable make_variable(Strategy& strategy, const Tensor& initial_value, VariableOptions options = {}) {
  StrategyScope scope = strategy.scope();
  return Variable(initial_value, std::move(options));
}
template <Element T>
Variable make_variable(Strategy& strategy, T initial_value, VariableOptions options = {}) {
  StrategyScope scope = strategy.scope();
  return Variable(initial_value, std::move(options));
}

}  // namespace distribute::testing
