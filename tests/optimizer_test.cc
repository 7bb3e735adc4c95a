// Optimizers: SGD (plain, momentum, nesterov) and Adam against hand-computed steps of Keras's
// update rules, in cross-replica context and in replica context with 1-4 replicas (the replicas'
// gradients summed, every component and slot equal), the single batched all_reduce per step, the
// slot and iteration variables, and every error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"
#include "testing/semantics_util.h"
#include "testing/variables.h"

namespace distribute {
namespace {

using optimizers::Adam;
using optimizers::Optimizer;
using optimizers::SGD;
using optimizers::SGDOptions;
using testing::cpu_devices;
using testing::current_test_name;
using testing::expect_error;
using testing::floats;
using testing::make_variable;
using testing::Watchdog;

constexpr std::chrono::milliseconds kHangLimit{20000};

void expect_near(const Tensor& actual, const std::vector<double>& expected, double tolerance, const std::string& what) {
  const std::vector<float> values = actual.to_vector<float>();
  ASSERT_EQ(values.size(), expected.size()) << what;
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_NEAR(values[i], expected[i], tolerance * std::max(1.0, std::fabs(expected[i]))) << what << " element " << i;
  }
}

// Keras's update rules written out element by element in double: the oracle the optimizers are
// compared against.
struct SgdReference {
  double lr;
  double momentum;
  bool nesterov;
  std::vector<double> w;
  std::vector<double> m = std::vector<double>(w.size(), 0.0);

  void step(const std::vector<double>& g) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (momentum == 0.0) {
        w[i] -= lr * g[i];
        continue;
      }
      m[i] = momentum * m[i] - lr * g[i];
      w[i] += nesterov ? momentum * m[i] - lr * g[i] : m[i];
    }
  }
};

struct AdamReference {
  double lr;
  double beta_1;
  double beta_2;
  double epsilon;
  std::vector<double> w;
  std::vector<double> m = std::vector<double>(w.size(), 0.0);
  std::vector<double> v = std::vector<double>(w.size(), 0.0);
  int t = 0;

  void step(const std::vector<double>& g) {
    ++t;
    const double alpha = lr * std::sqrt(1 - std::pow(beta_2, t)) / (1 - std::pow(beta_1, t));
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] += (g[i] - m[i]) * (1 - beta_1);
      v[i] += (g[i] * g[i] - v[i]) * (1 - beta_2);
      w[i] -= alpha * m[i] / (std::sqrt(v[i]) + epsilon);
    }
  }
};

// ---- hand-computed steps, one replica (no strategy)

TEST(SGD, PlainStepsAreWMinusLearningRateTimesGradient) {
  Variable w(floats({1.0f, 2.0f}), {.name = "w"});
  SGD sgd(0.1);
  EXPECT_TRUE(sgd.slot_names().empty());
  sgd.apply_gradients({{floats({0.5f, -1.0f}), w}});
  expect_near(w.value(), {0.95, 2.1}, 1e-7, "step 1");
  sgd.apply_gradients({{floats({0.5f, -1.0f}), w}});
  expect_near(w.value(), {0.9, 2.2}, 1e-7, "step 2");
  EXPECT_EQ(sgd.iterations().value().item<std::int64_t>(), 2);
}

TEST(SGD, MomentumStepsByHand) {
  // lr 0.1, momentum 0.9, gradient 1: m = -0.1, -0.19, -0.271; w = 0.9, 0.71, 0.439.
  Variable w(1.0f, {.name = "w"});
  SGD sgd(0.1, 0.9);
  const double expected_w[] = {0.9, 0.71, 0.439};
  const double expected_m[] = {-0.1, -0.19, -0.271};
  for (int step = 0; step < 3; ++step) {
    sgd.apply_gradients({{Tensor::scalar<float>(1.0f), w}});
    EXPECT_NEAR(w.value().item<float>(), expected_w[step], 1e-6) << step;
    EXPECT_NEAR(sgd.get_slot(w, "momentum").value().item<float>(), expected_m[step], 1e-6) << step;
  }
}

TEST(SGD, NesterovStepsByHand) {
  // lr 0.1, momentum 0.9, gradient 1: m = -0.1, -0.19, -0.271; w += 0.9 m - 0.1:
  // w = 0.81, 0.539, 0.1951.
  Variable w(1.0f);
  SGD sgd(SGDOptions{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
  EXPECT_TRUE(sgd.nesterov());
  const double expected_w[] = {0.81, 0.539, 0.1951};
  for (int step = 0; step < 3; ++step) {
    sgd.apply_gradients({{Tensor::scalar<float>(1.0f), w}});
    EXPECT_NEAR(w.value().item<float>(), expected_w[step], 1e-6) << step;
  }
}

TEST(Adam, StepsByHand) {
  // Keras's Adam, lr 0.1, epsilon 1e-7, worked out in double for these gradients.
  Variable w(floats({1.0f, -2.0f}), {.name = "w"});
  Adam adam(0.1);
  EXPECT_EQ(adam.epsilon(), 1e-7);
  const std::vector<std::vector<float>> gradients = {{1.0f, 0.5f}, {0.5f, -1.0f}, {-2.0f, 0.25f}};
  const std::vector<std::vector<double>> expected_w = {{0.900000316226766, -2.099999367548468},
                                                       {0.8067826161106244, -2.063389118404662},
                                                       {0.8274182903444286, -2.0497200898512578}};
  const std::vector<std::vector<double>> expected_m = {{0.1, 0.05}, {0.14, -0.055}, {-0.074, -0.0245}};
  const std::vector<std::vector<double>> expected_v = {
      {0.001, 0.00025}, {0.001249, 0.00124975}, {0.005247751, 0.00131100025}};
  for (std::size_t step = 0; step < gradients.size(); ++step) {
    adam.apply_gradients({{floats(gradients[step]), w}});
    const std::string what = "step " + std::to_string(step + 1);
    expect_near(w.value(), expected_w[step], 1e-6, what);
    expect_near(adam.get_slot(w, "m").value(), expected_m[step], 1e-6, what);
    expect_near(adam.get_slot(w, "v").value(), expected_v[step], 1e-6, what);
  }
  EXPECT_EQ(adam.iterations().value().item<std::int64_t>(), 3);
}

TEST(Adam, Float64VariablesStepInDouble) {
  Variable w(Tensor::from_vector<double>({1.0, -2.0}));
  Adam adam(0.1);
  AdamReference reference{0.1, 0.9, 0.999, 1e-7, {1.0, -2.0}};
  for (int step = 0; step < 5; ++step) {
    adam.apply_gradients({{Tensor::from_vector<double>({0.3 * step - 0.5, 1.0}), w}});
    reference.step({0.3 * step - 0.5, 1.0});
  }
  const std::vector<double> actual = w.value().to_vector<double>();
  for (std::size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], reference.w[i], 1e-12);
}

// ---- replica context, 1-4 replicas

class Optimizers : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }

  // Replica r's gradient at `step` for element i; the summed gradient is what the reference gets.
  static float gradient(int replica, int step, std::size_t i) {
    return 0.25f * static_cast<float>(replica + 1) * static_cast<float>(step + 1) - 0.5f * static_cast<float>(i);
  }
  std::vector<double> summed(int step, std::size_t size) const {
    std::vector<double> g(size, 0.0);
    for (int r = 0; r < n(); ++r) {
      for (std::size_t i = 0; i < size; ++i) g[i] += gradient(r, step, i);
    }
    return g;
  }
  static Tensor replica_gradient(int step, std::size_t size) {
    const int r = get_replica_context()->replica_id_in_sync_group();
    std::vector<float> g;
    for (std::size_t i = 0; i < size; ++i) g.push_back(gradient(r, step, i));
    return floats(std::move(g));
  }

  // Every component of v equal to the first, bit for bit.
  static void expect_components_equal(const Variable& v) {
    for (int i = 1; i < v.num_components(); ++i) {
      EXPECT_EQ(v.component(i).to_vector<float>(), v.component(0).to_vector<float>())
          << v.name() << " component " << i;
    }
  }

 private:
  Watchdog watchdog_{kHangLimit, current_test_name()};
};

INSTANTIATE_TEST_SUITE_P(Replicas, Optimizers, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "replicas"; });

TEST_P(Optimizers, SgdWithMomentumSumsTheReplicasGradients) {
  for (const bool nesterov : {false, true}) {
    MirroredStrategy strategy(cpu_devices(n()));
    Variable w = make_variable(strategy, floats({1, 2, 3}), {.name = "w"});
    Variable b = make_variable(strategy, floats({0.5f}), {.name = "b"});
    StrategyScope scope = strategy.scope();
    SGD sgd(SGDOptions{.learning_rate = 0.05, .momentum = 0.9, .nesterov = nesterov});
    SgdReference rw{0.05, 0.9, nesterov, {1, 2, 3}};
    SgdReference rb{0.05, 0.9, nesterov, {0.5}};
    constexpr int kSteps = 4;
    strategy.run([&] {
      for (int step = 0; step < kSteps; ++step) {
        sgd.apply_gradients({{replica_gradient(step, 3), w}, {replica_gradient(step, 1), b}});
      }
    });
    for (int step = 0; step < kSteps; ++step) {
      rw.step(summed(step, 3));
      rb.step(summed(step, 1));
    }
    for (int i = 0; i < n(); ++i) {
      expect_near(w.component(i), rw.w, 1e-5, "w");
      expect_near(b.component(i), rb.w, 1e-5, "b");
      expect_near(sgd.get_slot(w, "momentum").component(i), rw.m, 1e-5, "momentum");
      EXPECT_EQ(sgd.iterations().component(i).item<std::int64_t>(), kSteps);
    }
    expect_components_equal(w);
    expect_components_equal(b);
    expect_components_equal(sgd.get_slot(w, "momentum"));
    EXPECT_EQ(sgd.get_slot(w, "momentum").num_components(), n());
  }
}

TEST_P(Optimizers, AdamSumsTheReplicasGradients) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable w = make_variable(strategy, floats({1, -2}), {.name = "w"});
  StrategyScope scope = strategy.scope();
  Adam adam(0.01, 0.8, 0.99, 1e-6);
  AdamReference reference{0.01, 0.8, 0.99, 1e-6, {1, -2}};
  constexpr int kSteps = 5;
  strategy.run([&] {
    for (int step = 0; step < kSteps; ++step) adam.apply_gradients({{replica_gradient(step, 2), w}});
  });
  for (int step = 0; step < kSteps; ++step) reference.step(summed(step, 2));
  for (int i = 0; i < n(); ++i) {
    expect_near(w.component(i), reference.w, 1e-5, "w");
    expect_near(adam.get_slot(w, "m").component(i), reference.m, 1e-5, "m");
    expect_near(adam.get_slot(w, "v").component(i), reference.v, 1e-5, "v");
  }
  expect_components_equal(w);
  expect_components_equal(adam.get_slot(w, "m"));
  expect_components_equal(adam.get_slot(w, "v"));
}

TEST_P(Optimizers, SkippingAggregationAppliesGradientsTheCallerSummed) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable w = make_variable(strategy, floats({1, -2}), {.name = "w"});
  StrategyScope scope = strategy.scope();
  Adam adam(0.01, 0.8, 0.99, 1e-6);
  adam.build({w});
  AdamReference reference{0.01, 0.8, 0.99, 1e-6, {1, -2}};
  constexpr int kSteps = 3;
  strategy.run([&] {
    for (int step = 0; step < kSteps; ++step) {
      Tensor gradient = replica_gradient(step, 2);
      get_replica_context()->all_reduce_in_place(ReduceOp::kSum, gradient);
      adam.apply_gradients({{gradient, w}}, {.skip_gradients_aggregation = true});
    }
  });
  for (int step = 0; step < kSteps; ++step) reference.step(summed(step, 2));
  for (int i = 0; i < n(); ++i) expect_near(w.component(i), reference.w, 1e-5, "w");
  expect_components_equal(w);
}

TEST(Optimizer, SkippingAggregationRunsNoCollective) {
  // Replica 0 skips the aggregation and replica 1 does not call the optimizer: with a collective
  // inside the skipping call the run would fail with a mismatch.
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(2));
  Variable w = make_variable(strategy, floats({1, 2}));
  StrategyScope scope = strategy.scope();
  SGD sgd(0.5);
  sgd.build({w});  // otherwise the first step registers w in a merge_call
  strategy.run([&] {
    if (get_replica_context()->replica_id_in_sync_group() == 0) {
      sgd.apply_gradients({{floats({2, 2}), w}}, {.skip_gradients_aggregation = true});
    }
  });
  EXPECT_EQ(w.component(0).to_vector<float>(), (std::vector<float>{0, 1}));
  EXPECT_EQ(w.component(1).to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST_P(Optimizers, CrossReplicaApplyUpdatesEveryComponentWithTheGivenGradients) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable w = make_variable(strategy, floats({1, 2}));
  StrategyScope scope = strategy.scope();
  SGD sgd(0.1, 0.5);
  sgd.apply_gradients({{floats({1, -1}), w}});
  sgd.apply_gradients({{floats({1, -1}), w}});
  SgdReference reference{0.1, 0.5, false, {1, 2}};
  reference.step({1, -1});
  reference.step({1, -1});
  for (int i = 0; i < n(); ++i) {
    expect_near(w.component(i), reference.w, 1e-6, "w");
    EXPECT_EQ(sgd.iterations().component(i).item<std::int64_t>(), 2);
  }
}

TEST_P(Optimizers, ReplicaStepsContinueCrossReplicaSteps) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable w = make_variable(strategy, floats({1}));
  StrategyScope scope = strategy.scope();
  SGD sgd(0.1, 0.9);
  sgd.apply_gradients({{floats({static_cast<float>(n())}), w}});  // slots made in cross-replica context
  strategy.run([&] { sgd.apply_gradients({{floats({1}), w}}); });  // each replica 1: summed n
  SgdReference reference{0.1, 0.9, false, {1}};
  reference.step({static_cast<double>(n())});
  reference.step({static_cast<double>(n())});
  for (int i = 0; i < n(); ++i) expect_near(w.component(i), reference.w, 1e-6, "w");
  EXPECT_EQ(sgd.iterations().value().item<std::int64_t>(), 2);
}

TEST(Optimizer, ApplyGradientsInAReplicaIsExactlyOneAllReduceOfTheGradientList) {
  // After build(), a replica's apply_gradients is one all_reduce of the whole gradient list, named
  // for the optimizer and its variables: against a user's own all_reduce of the same list it is
  // all_reduce #1 of several leaves, and nothing follows it (a replica's next collective is #2).
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(2));
  Variable w = make_variable(strategy, floats({1, 2}), {.name = "w"});
  Variable b = make_variable(strategy, floats({3}), {.name = "b"});
  StrategyScope scope = strategy.scope();
  SGD sgd(0.5, 0.9);
  sgd.build({w, b});
  const auto grads = [] { return std::vector<Tensor>{floats({1, 2}), floats({4})}; };
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          if (get_replica_context()->replica_id_in_sync_group() == 0) {
            sgd.apply_gradients({{grads()[0], w}, {grads()[1], b}});
          } else {
            get_replica_context()->all_reduce(ReduceOp::kSum, grads());
          }
        });
      },
      {"all_reduce #1 (leaf 0): replica 0 called SGD.apply_gradients of 'w' where replica 1 called all_reduce "
       "directly; every replica must make the same updates in the same order"});
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([&] {
          sgd.apply_gradients({{grads()[0], w}, {grads()[1], b}});
          if (get_replica_context()->replica_id_in_sync_group() == 1) {
            get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f);
          }
        });
      },
      {"replica 0 returned from the replica function while replica 1 waits in all_reduce (collective #2)"});
  // The first run failed before any update; the second's step summed [1, 2] and [4] over the two
  // replicas: m = -0.5 g, w += m.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(w.component(i).to_vector<float>(), (std::vector<float>{0, 0}));
    EXPECT_EQ(b.component(i).to_vector<float>(), (std::vector<float>{-1}));
  }
}

TEST(Optimizer, FirstReplicaStepCreatesTheSlotsInOneMergeCall) {
  // Without build(), the first step's first collective is a merge_call, named for the optimizer
  // and its variables (a merge_call of the user's does not pair with it); the slots then exist
  // for the next steps.
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(2));
  Variable w = make_variable(strategy, floats({1}), {.name = "w"});
  StrategyScope scope = strategy.scope();
  SGD sgd(0.5, 0.9);
  EXPECT_EQ(sgd.variables().size(), 1u);  // iterations only
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          if (get_replica_context()->replica_id_in_sync_group() == 0) {
            sgd.apply_gradients({{floats({1}), w}});
          } else {
            get_replica_context()->merge_call([](Strategy&) {});
          }
        });
      },
      {"merge_call #1: replica 0 called SGD.apply_gradients of 'w' where replica 1 called merge_call directly"});
  EXPECT_EQ(sgd.variables().size(), 1u);
  strategy.run([&] { sgd.apply_gradients({{floats({1}), w}}); });
  EXPECT_EQ(sgd.variables().size(), 2u);
  EXPECT_EQ(sgd.get_slot(w, "momentum").component(1).to_vector<float>(), (std::vector<float>{-1}));
}

TEST(Optimizer, SlotNamesAndVariables) {
  MirroredStrategy strategy(cpu_devices(2));
  Variable w = make_variable(strategy, floats({1, 2}), {.name = "w"});
  Variable b = make_variable(strategy, floats({3}), {.name = "b"});
  StrategyScope scope = strategy.scope();
  Adam adam;
  EXPECT_EQ(adam.name(), "Adam");
  EXPECT_EQ(adam.learning_rate(), 0.001);
  EXPECT_EQ(adam.beta_1(), 0.9);
  EXPECT_EQ(adam.beta_2(), 0.999);
  EXPECT_EQ(adam.slot_names(), (std::vector<std::string>{"m", "v"}));
  EXPECT_EQ(adam.iterations().name(), "Adam/iterations");
  EXPECT_EQ(adam.iterations().dtype(), DType::kInt64);
  EXPECT_EQ(adam.iterations().aggregation(), VariableAggregation::kOnlyFirstReplica);
  EXPECT_FALSE(adam.iterations().trainable());
  EXPECT_EQ(adam.iterations().num_components(), 2);
  adam.build({w, b});
  adam.build({w});  // existing slots are kept
  std::vector<std::string> names;
  for (const Variable& v : adam.variables()) names.push_back(v.name());
  EXPECT_EQ(names, (std::vector<std::string>{"Adam/iterations", "Adam/w/m", "Adam/w/v", "Adam/b/m", "Adam/b/v"}));
  const Variable m = adam.get_slot(w, "m");
  EXPECT_EQ(m.shape(), Shape{2});
  EXPECT_EQ(m.num_components(), 2);
  EXPECT_FALSE(m.trainable());
  EXPECT_EQ(m.component(1).to_vector<float>(), (std::vector<float>{0, 0}));
  EXPECT_TRUE(adam.get_slot(w, "m") == m);
  SGD sgd;
  EXPECT_EQ(sgd.learning_rate(), 0.01);
  EXPECT_EQ(sgd.momentum(), 0.0);
  EXPECT_FALSE(sgd.nesterov());
  const SGD from_options(SGDOptions{.momentum = 0.5});
  EXPECT_EQ(from_options.learning_rate(), 0.01);
  EXPECT_EQ(from_options.momentum(), 0.5);
  EXPECT_FALSE(from_options.nesterov());
  sgd.set_learning_rate(0.5);
  EXPECT_EQ(sgd.learning_rate(), 0.5);
}

TEST(Optimizer, ChangingTheLearningRateChangesTheNextSteps) {
  Variable w(1.0f);
  SGD sgd(0.1);
  sgd.apply_gradients({{Tensor::scalar<float>(1.0f), w}});
  sgd.set_learning_rate(0.5);
  sgd.apply_gradients({{Tensor::scalar<float>(1.0f), w}});
  EXPECT_NEAR(w.value().item<float>(), 0.4f, 1e-6f);
}

// ---- errors

TEST(Optimizer, ConstructorChecks) {
  expect_error<InvalidArgumentError>([] { SGD sgd(0.1, 1.5); }, {"SGD: momentum is 1.5; it must be in [0, 1]"});
  expect_error<InvalidArgumentError>([] { SGD sgd(0.1, -0.1); }, {"SGD: momentum is -0.1; it must be in [0, 1]"});
  expect_error<InvalidArgumentError>([] { SGD sgd(SGDOptions{.momentum = 2.0, .nesterov = true}); },
                                     {"SGD: momentum is 2; it must be in [0, 1]"});
  expect_error<InvalidArgumentError>([] { SGD sgd(SGDOptions{.learning_rate = -1.0}); },
                                     {"SGD: learning_rate is -1; it must be >= 0 and finite"});
  expect_error<InvalidArgumentError>([] { Adam adam(0.1, 1.0); }, {"Adam: beta_1 is 1; it must be in [0, 1)"});
  expect_error<InvalidArgumentError>([] { Adam adam(0.1, 0.9, -0.5); },
                                     {"Adam: beta_2 is -0.5; it must be in [0, 1)"});
  expect_error<InvalidArgumentError>([] { Adam adam(0.1, 0.9, 0.999, -1.0); },
                                     {"Adam: epsilon is -1; it must be >= 0"});
}

// SGD(NaN) and set_learning_rate(-inf) used to be accepted and wrote NaN into the weights.
TEST(Optimizer, NonFiniteOrNegativeHyperparametersAreRejected) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_error<InvalidArgumentError>([&] { SGD sgd(nan); },
                                     {"SGD: learning_rate is nan; it must be >= 0 and finite"});
  expect_error<InvalidArgumentError>([&] { SGD sgd(-0.1, 0.9); }, {"SGD: learning_rate is -0.1"});
  expect_error<InvalidArgumentError>([&] { Adam adam(inf); }, {"Adam: learning_rate is inf"});
  expect_error<InvalidArgumentError>([&] { Adam adam(-1e-3); }, {"Adam: learning_rate is -0.001"});
  expect_error<InvalidArgumentError>([&] { SGD sgd(0.1, nan); }, {"SGD: momentum is nan; it must be in [0, 1]"});
  expect_error<InvalidArgumentError>([&] { Adam adam(0.1, nan); }, {"Adam: beta_1 is nan"});
  expect_error<InvalidArgumentError>([&] { Adam adam(0.1, 0.9, nan); }, {"Adam: beta_2 is nan"});
  expect_error<InvalidArgumentError>([&] { Adam adam(0.1, 0.9, 0.999, nan); }, {"Adam: epsilon is nan"});
  expect_error<InvalidArgumentError>([&] { Adam adam(0.1, 0.9, 0.999, inf); },
                                     {"Adam: epsilon is inf; it must be >= 0 and finite"});

  Variable w(1.0f);
  SGD sgd(0.1);
  Adam adam(0.1);
  expect_error<InvalidArgumentError>([&] { sgd.set_learning_rate(-inf); },
                                     {"SGD.set_learning_rate: learning_rate is -inf; it must be >= 0 and finite"});
  expect_error<InvalidArgumentError>([&] { sgd.set_learning_rate(nan); },
                                     {"SGD.set_learning_rate: learning_rate is nan"});
  expect_error<InvalidArgumentError>([&] { adam.set_learning_rate(inf); }, {"Adam.set_learning_rate"});
  EXPECT_EQ(sgd.learning_rate(), 0.1) << "a rejected rate leaves the old one";
  sgd.apply_gradients({{Tensor::scalar<float>(1.0f), w}});
  EXPECT_NEAR(w.value().item<float>(), 0.9f, 1e-6f);
  sgd.set_learning_rate(0.0);  // zero is a rate: the weights stay
  sgd.apply_gradients({{Tensor::scalar<float>(1.0f), w}});
  EXPECT_NEAR(w.value().item<float>(), 0.9f, 1e-6f);
}

TEST(Optimizer, ApplyGradientsChecksEveryPair) {
  Variable w(floats({1, 2}), {.name = "w"});
  Variable frozen(floats({1}), {.name = "frozen", .trainable = false});
  Variable count(1, {.name = "count"});
  Variable metric(1.0f, {.name = "metric",
                         .synchronization = VariableSynchronization::kOnRead,
                         .aggregation = VariableAggregation::kSum});
  SGD sgd(0.1);
  const std::string prefix = "SGD.apply_gradients: ";
  expect_error<InvalidArgumentError>([&] { sgd.apply_gradients({}); },
                                     {prefix + "no (gradient, variable) pairs were given"});
  expect_error<InvalidArgumentError>([&] { sgd.apply_gradients({{floats({1}), Variable()}}); },
                                     {prefix + "variable 0 of the list is undefined (default-constructed)"});
  expect_error<InvalidArgumentError>([&] { sgd.apply_gradients({{floats({1}), frozen}}); },
                                     {prefix + "variable 'frozen' is not trainable"});
  expect_error<InvalidArgumentError>(
      [&] { sgd.apply_gradients({{Tensor::scalar<float>(1), metric}}); },
      {prefix + "variable 'metric' is synchronized ON_READ; optimizers update ON_WRITE (mirrored) variables"});
  expect_error<InvalidArgumentError>(
      [&] { sgd.apply_gradients({{Tensor::scalar<int>(1), count}}); },
      {prefix + "variable 'count' has dtype int32; optimizers update float32 and float64 variables"});
  expect_error<InvalidArgumentError>([&] { sgd.apply_gradients({{Tensor(), w}}); },
                                     {prefix + "the gradient of variable 'w' is an undefined Tensor"});
  expect_error<InvalidArgumentError>(
      [&] { sgd.apply_gradients({{Tensor::from_vector<double>({1, 2}), w}}); },
      {prefix + "the gradient of variable 'w' has dtype float64 but the variable has dtype float32"});
  expect_error<InvalidArgumentError>(
      [&] { sgd.apply_gradients({{floats({1, 2, 3}), w}}); },
      {prefix + "the gradient of variable 'w' has shape (3,) but the variable has shape (2,)"});
  expect_error<InvalidArgumentError>([&] { sgd.apply_gradients({{floats({1, 2}), w}, {floats({1, 2}), w}}); },
                                     {prefix + "variable 'w' is listed twice (at 0 and 1)"});
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{1, 2}));
  expect_error<InvalidArgumentError>([&] { sgd.build({frozen}); }, {"SGD.build: variable 'frozen' is not trainable"});
}

TEST(Optimizer, VariablesAndOptimizerOfDifferentStrategies) {
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(2));
  Variable w = make_variable(strategy, floats({1}), {.name = "w"});
  SGD outside(0.1);  // made for the default strategy
  expect_error<InvalidArgumentError>(
      [&] { outside.apply_gradients({{floats({1}), w}}); },
      {"SGD.apply_gradients: variable 'w' was created for MirroredStrategy(CPU:0, CPU:1) but the optimizer for "
       "DefaultStrategy", "create the optimizer under the scope of the variables' strategy"});
  expect_error<FailedPreconditionError>(
      [&] { strategy.run([&] { outside.apply_gradients({{floats({1}), w}}); }); },
      {"SGD.apply_gradients: called in a replica of MirroredStrategy(CPU:0, CPU:1) but the optimizer was created for "
       "DefaultStrategy"});
  EXPECT_EQ(w.component(1).to_vector<float>(), (std::vector<float>{1}));
}

TEST(Optimizer, ReplicaOnlyCallsAreFailedPreconditions) {
  MirroredStrategy strategy(cpu_devices(2));
  Variable w = make_variable(strategy, floats({1}));
  StrategyScope scope = strategy.scope();
  SGD sgd(0.1, 0.9);
  expect_error<FailedPreconditionError>([&] { strategy.run([&] { sgd.set_learning_rate(1.0); }); },
                                        {"SGD.set_learning_rate: called inside a replica's fn"});
  expect_error<FailedPreconditionError>([&] { strategy.run([&] { sgd.build({w}); }); },
                                        {"SGD.build: called inside a replica's fn"});
  expect_error<FailedPreconditionError>([&] { strategy.run([&] { SGD inside(0.1); }); },
                                        {"SGD: created inside a replica's fn; create the optimizer under "
                                         "strategy.scope(), outside Strategy::run"});
}

TEST(Optimizer, GetSlotErrors) {
  Variable w(floats({1}), {.name = "w"});
  SGD sgd(0.1, 0.9);
  expect_error<InvalidArgumentError>([&] { (void)sgd.get_slot(w, "momentum"); },
                                     {"SGD.get_slot: variable 'w' has no slots yet; apply_gradients or build creates "
                                      "them"});
  sgd.build({w});
  expect_error<InvalidArgumentError>([&] { (void)sgd.get_slot(w, "m"); },
                                     {"SGD.get_slot: no slot named 'm'; its slots: momentum"});
  expect_error<InvalidArgumentError>([&] { (void)sgd.get_slot(Variable(), "m"); },
                                     {"SGD.get_slot: the variable is undefined"});
  SGD plain(0.1);
  plain.build({w});
  expect_error<InvalidArgumentError>([&] { (void)plain.get_slot(w, "momentum"); }, {"its slots: none"});
}

// A checkpoint of the state holds every slot, or is refused: asked before the slots exist (before
// build or the first step) the state would lack them, and one taken before slots were made for
// another variable would save and restore without those.
TEST(Optimizer, CheckpointStateWithoutEverySlotIsAFailedPrecondition) {
  Variable w(floats({1, 2}), {.name = "w"});
  Variable b(floats({3}), {.name = "b"});
  Adam adam;
  expect_error<FailedPreconditionError>([&] { (void)adam.checkpoint_state(); },
                                        {"Adam.checkpoint_state: the optimizer has no slots yet (m, v)",
                                         "call build(variables) with the variables it trains first"});
  SGD momentum(0.1, 0.9);
  expect_error<FailedPreconditionError>([&] { (void)momentum.checkpoint_state(); },
                                        {"SGD.checkpoint_state: the optimizer has no slots yet (momentum)"});
  SGD plain(0.1);
  EXPECT_EQ(plain.checkpoint_state().size(), 1u) << "without momentum there is no slot to wait for";

  adam.build({w});
  const std::vector<std::pair<std::string, Saveable>> state = adam.checkpoint_state();
  std::vector<std::string> names;
  for (const auto& [name, saveable] : state) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"Adam/iterations", "Adam/w/m", "Adam/w/v"}));
  EXPECT_EQ(state[0].second.read().item<std::int64_t>(), 0);
  adam.apply_gradients({{floats({1}), b}});  // makes b's slots, after the state was taken
  const std::vector<std::string> stale = {"Adam.checkpoint_state: slots were made for 'b' after this state was taken",
                                          "take checkpoint_state() again"};
  expect_error<FailedPreconditionError>([&] { (void)state[0].second.read(); }, stale);
  expect_error<FailedPreconditionError>(
      [&] { state[0].second.write(Tensor::scalar(std::int64_t{0}, Device::cpu())); }, stale);
  names.clear();
  for (const auto& [name, saveable] : adam.checkpoint_state()) {
    names.push_back(name);
    EXPECT_TRUE(saveable.read().defined()) << name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"Adam/iterations", "Adam/w/m", "Adam/w/v", "Adam/b/m", "Adam/b/v"}));
}

TEST(Optimizer, ABadGradientOnOneReplicaEndsTheRunWithItsError) {
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(3));
  Variable w = make_variable(strategy, floats({1, 2}), {.name = "w"});
  StrategyScope scope = strategy.scope();
  SGD sgd(0.1, 0.9);
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          const bool bad = get_replica_context()->replica_id_in_sync_group() == 1;
          sgd.apply_gradients({{bad ? floats({1}) : floats({1, 2}), w}});
        });
      },
      {"SGD.apply_gradients: the gradient of variable 'w' has shape (1,) but the variable has shape (2,)"});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(w.component(i).to_vector<float>(), (std::vector<float>{1, 2}));
  strategy.run([&] { sgd.apply_gradients({{floats({1, 1}), w}}); });  // usable afterwards
  for (int i = 0; i < 3; ++i) expect_near(w.component(i), {0.7, 1.7}, 1e-6, "w");
}

TEST(Optimizer, ReplicasWithDifferentOptimizersOrVariablesFailTheFirstStep) {
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(2));
  Variable w = make_variable(strategy, floats({1}), {.name = "w"});
  Variable v = make_variable(strategy, floats({1}), {.name = "v"});
  StrategyScope scope = strategy.scope();
  SGD first(0.1, 0.9);
  SGD second(0.1, 0.9);
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          SGD& mine = get_replica_context()->replica_id_in_sync_group() == 0 ? first : second;
          mine.apply_gradients({{floats({1}), w}});
        });
      },
      {"SGD.apply_gradients: replica 1 called it on another optimizer than replica 0",
       "create one optimizer under strategy.scope() and use it in every replica"});
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          const Variable& mine = get_replica_context()->replica_id_in_sync_group() == 0 ? w : v;
          first.apply_gradients({{floats({1}), mine}});
        });
      },
      {"merge_call #1: replica 0 called SGD.apply_gradients of 'w' where replica 1 called SGD.apply_gradients of "
       "'v'; every replica must make the same updates in the same order"});
}

}  // namespace
}  // namespace distribute
