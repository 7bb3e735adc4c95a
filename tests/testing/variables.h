// Shared helpers for the tests of variables, optimizers and checkpoints: variables created under a
// strategy's scope, and the running test's name for watchdog messages.
#pragma once

#include <gtest/gtest.h>

#include <string>
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

// "Suite.Test" of the running test.
inline std::string current_test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

}  // namespace distribute::testing
