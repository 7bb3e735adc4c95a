// The promises about which variable a collective is for, and about a variable's strategy: updates
// of different variables at one point are an error on every replica (for every aggregation, in
// either order), apply_gradients with the variables in another order or set is an error (on the
// first step and after build()), a variable, optimizer or checkpoint used after its strategy was
// destroyed is a FailedPreconditionError (also when a new strategy took the old one's address),
// and bad options or another strategy's scope are typed errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"
#include "testing/semantics_util.h"
#include "testing/temp_files.h"
#include "testing/variables.h"

namespace distribute {
namespace {

using optimizers::SGD;
using testing::cpu_devices;
using testing::current_test_name;
using testing::expect_error;
using testing::floats;
using testing::make_variable;
using testing::replica_id;
using testing::Watchdog;

constexpr std::chrono::milliseconds kHangLimit{20000};

// ---- updates of different variables

class UpdatesByAggregation : public ::testing::TestWithParam<VariableAggregation> {
 private:
  Watchdog watchdog_{kHangLimit, current_test_name()};
};

INSTANTIATE_TEST_SUITE_P(Aggregations, UpdatesByAggregation,
                         ::testing::Values(VariableAggregation::kSum, VariableAggregation::kMean,
                                           VariableAggregation::kOnlyFirstReplica),
                         [](const auto& p) { return std::string(aggregation_name(p.param)); });

TEST_P(UpdatesByAggregation, DifferentVariablesInAnotherOrderAreAnError) {
  MirroredStrategy strategy(cpu_devices(2));
  Variable a = make_variable(strategy, 0.0f, {.name = "a", .aggregation = GetParam()});
  Variable b = make_variable(strategy, 0.0f, {.name = "b", .aggregation = GetParam()});
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          if (replica_id() == 0) {
            a.assign_add(1.0f);
            b.assign_add(10.0f);
          } else {
            b.assign_add(10.0f);
            a.assign_add(1.0f);
          }
        });
      },
      {"#1: replica 0 called assign_add of 'a' where replica 1 called assign_add of 'b'",
       "every replica must make the same updates in the same order"});
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a.component(i).item<float>(), 0.0f);
    EXPECT_EQ(b.component(i).item<float>(), 0.0f);
  }
  // The same updates in the same order still combine as the aggregation says.
  strategy.run([&] {
    a.assign_add(1.0f);
    b.assign_add(10.0f);
  });
  const float sum = GetParam() == VariableAggregation::kSum ? 2.0f : 1.0f;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a.component(i).item<float>(), sum);
    EXPECT_EQ(b.component(i).item<float>(), 10.0f * sum);
  }
}

TEST_P(UpdatesByAggregation, AnotherUpdateOfAnotherVariableIsAnError) {
  MirroredStrategy strategy(cpu_devices(3));
  Variable a = make_variable(strategy, 0.0f, {.name = "a", .aggregation = GetParam()});
  Variable b = make_variable(strategy, 0.0f, {.name = "b", .aggregation = GetParam()});
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          if (replica_id() == 1) {
            b.assign_add(1.0f);
          } else {
            a.assign(1.0f);
          }
        });
      },
      {"#1: replicas 0, 2 called assign of 'a' where replica 1 called assign_add of 'b'"});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.component(i).item<float>(), 0.0f);
}

TEST(VariableIdentity, VariablesOfOneNameAreToldApartByTheirNumber) {
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(2));
  Variable first = make_variable(strategy, 0.0f, {.aggregation = VariableAggregation::kSum});
  Variable second = make_variable(strategy, 0.0f, {.aggregation = VariableAggregation::kSum});
  expect_error<InvalidArgumentError>(
      [&] { strategy.run([&] { (replica_id() == 0 ? first : second).assign_add(1.0f); }); },
      {"replica 0 called assign_add of 'Variable' (variable #0, id ", "where replica 1 called assign_add of "
                                                                      "'Variable' (variable #1, id "});
}

TEST(VariableIdentity, AnUpdateAgainstAUsersOwnAllReduceIsAnError) {
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(2));
  Variable a = make_variable(strategy, 0.0f, {.name = "a", .aggregation = VariableAggregation::kSum});
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          if (replica_id() == 0) {
            a.assign_add(1.0f);
          } else {
            get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::scalar(1.0f));
          }
        });
      },
      {"all_reduce #1: replica 0 called assign_add of 'a' where replica 1 called all_reduce directly"});
}

TEST(VariableIdentity, AnUpdateAgainstAnotherKindOfUpdateNamesBoth) {
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(2));
  Variable a = make_variable(strategy, 0.0f, {.name = "a", .aggregation = VariableAggregation::kSum});
  Variable b = make_variable(strategy, 0.0f, {.name = "b", .aggregation = VariableAggregation::kOnlyFirstReplica});
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([&] {
          if (replica_id() == 0) {
            a.assign_add(1.0f);
          } else {
            b.assign_add(1.0f);
          }
        });
      },
      {"replica 1 called merge_call for assign_add of 'b' where replica 0 called all_reduce for assign_add of 'a' "
       "(collective #1)"});
}

// ---- apply_gradients with another order or set of variables

class ApplyGradientsOrder : public ::testing::TestWithParam<bool> {
 protected:
  bool built() const { return GetParam(); }

 private:
  Watchdog watchdog_{kHangLimit, current_test_name()};
};

INSTANTIATE_TEST_SUITE_P(Slots, ApplyGradientsOrder, ::testing::Bool(),
                         [](const auto& p) { return p.param ? std::string("AfterBuild") : std::string("FirstStep"); });

TEST_P(ApplyGradientsOrder, AnotherOrderOnAReplicaIsAnError) {
  MirroredStrategy strategy(cpu_devices(2));
  Variable w1 = make_variable(strategy, floats({1, 1}), {.name = "w1"});
  Variable w2 = make_variable(strategy, floats({5, 5}), {.name = "w2"});
  StrategyScope scope = strategy.scope();
  SGD sgd(1.0);
  if (built()) sgd.build({w1, w2});
  const auto step = [&](bool swapped) {
    const Tensor g1 = floats({1, 1});
    const Tensor g2 = floats({100, 100});
    if (swapped) {
      sgd.apply_gradients({{g2, w2}, {g1, w1}});
    } else {
      sgd.apply_gradients({{g1, w1}, {g2, w2}});
    }
  };
  expect_error<InvalidArgumentError>(
      [&] { strategy.run([&] { step(replica_id() == 1); }); },
      {built() ? "all_reduce #1 (leaf 0): " : "merge_call #1 (leaf 0): ",
       "replica 0 called SGD.apply_gradients of 'w1' where replica 1 called SGD.apply_gradients of 'w2'"});
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(w1.component(i).to_vector<float>(), (std::vector<float>{1, 1}));
    EXPECT_EQ(w2.component(i).to_vector<float>(), (std::vector<float>{5, 5}));
  }
  // In one order on every replica: each gradient summed over the two replicas, applied to its own.
  strategy.run([&] { step(false); });
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(w1.component(i).to_vector<float>(), (std::vector<float>{-1, -1}));
    EXPECT_EQ(w2.component(i).to_vector<float>(), (std::vector<float>{-195, -195}));
  }
}

TEST_P(ApplyGradientsOrder, AnotherVariableOnAReplicaIsAnErrorOnEveryStep) {
  MirroredStrategy strategy(cpu_devices(2));
  Variable w1 = make_variable(strategy, floats({1, 1}), {.name = "w1"});
  Variable w2 = make_variable(strategy, floats({5, 5}), {.name = "w2"});
  StrategyScope scope = strategy.scope();
  SGD sgd(1.0);
  if (built()) sgd.build({w1, w2});
  strategy.run([&] { sgd.apply_gradients({{floats({0, 0}), w1}, {floats({0, 0}), w2}}); });
  for (int step = 0; step < 2; ++step) {
    expect_error<InvalidArgumentError>(
        [&] {
          strategy.run([&] {
            const Tensor g = floats({100, 100});
            sgd.apply_gradients({{g, replica_id() == 0 ? w1 : w2}});
          });
        },
        {"all_reduce #1: replica 0 called SGD.apply_gradients of 'w1' where replica 1 called SGD.apply_gradients of "
         "'w2'"});
  }
  // The copies of each variable did not drift apart.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(w1.component(i).to_vector<float>(), (std::vector<float>{1, 1}));
    EXPECT_EQ(w2.component(i).to_vector<float>(), (std::vector<float>{5, 5}));
  }
}

// ---- a variable, optimizer or checkpoint outliving its strategy

TEST(VariableIdentity, AVariableOutlivingItsStrategyIsAFailedPrecondition) {
  Variable v;
  {
    MirroredStrategy strategy(cpu_devices(2));
    v = make_variable(strategy, 1.0f, {.name = "v"});
  }
  const std::vector<std::string> destroyed = {
      "Variable 'v' was made for MirroredStrategy(CPU:0, CPU:1), which has been destroyed"};
  expect_error<FailedPreconditionError>([&] { v.assign(2.0f); }, destroyed);
  expect_error<FailedPreconditionError>([&] { v.assign_add(2.0f); }, destroyed);
  expect_error<FailedPreconditionError>([&] { v.value(); }, destroyed);
  expect_error<FailedPreconditionError>([&] { v.distribute_strategy(); }, destroyed);
  // Its last values stay readable.
  EXPECT_EQ(v.num_components(), 2);
  EXPECT_EQ(v.component(1).item<float>(), 1.0f);
  std::ostringstream printed;
  printed << v;
  EXPECT_NE(printed.str().find("numpy=1.0"), std::string::npos) << printed.str();
}

TEST(VariableIdentity, ANewStrategyAtTheOldAddressIsNotTheVariablesStrategy) {
  Watchdog watchdog(kHangLimit, current_test_name());
  std::optional<MirroredStrategy> strategy;
  strategy.emplace(cpu_devices(2));
  const Strategy* first_address = &*strategy;
  Variable v = make_variable(*strategy, 1.0f, {.name = "v", .aggregation = VariableAggregation::kSum});
  strategy.reset();
  strategy.emplace(cpu_devices(3));
  ASSERT_EQ(&*strategy, first_address);
  expect_error<FailedPreconditionError>(
      [&] { strategy->run([&] { v.assign_add(1.0f); }); },
      {"Variable 'v' was made for MirroredStrategy(CPU:0, CPU:1), which has been destroyed"});
  StrategyScope scope = strategy->scope();
  EXPECT_FALSE(strategy->extended().variable_created_in_scope(v));
}

TEST(VariableIdentity, AnOptimizerOrCheckpointOutlivingItsStrategyIsAFailedPrecondition) {
  std::optional<MirroredStrategy> strategy;
  strategy.emplace(cpu_devices(2));
  Variable w = make_variable(*strategy, floats({1, 2}), {.name = "w"});
  std::optional<SGD> sgd;
  {
    StrategyScope scope = strategy->scope();
    sgd.emplace(0.1);
  }
  const std::filesystem::path path = testing::temp_path(current_test_name(), ".safetensors");
  Checkpoint checkpoint({{"w", w}});
  checkpoint.save(path);
  strategy.reset();
  expect_error<FailedPreconditionError>([&] { sgd->apply_gradients({{floats({1, 1}), w}}); },
                                        {"SGD was made for MirroredStrategy(CPU:0, CPU:1), which has been destroyed"});
  expect_error<FailedPreconditionError>([&] { checkpoint.save(path); },
                                        {"Variable 'w' was made for MirroredStrategy(CPU:0, CPU:1), which has been "
                                         "destroyed"});
  expect_error<FailedPreconditionError>([&] { checkpoint.restore(path); },
                                        {"Variable 'w' was made for MirroredStrategy(CPU:0, CPU:1), which has been "
                                         "destroyed"});
  EXPECT_EQ(w.component(0).to_vector<float>(), (std::vector<float>{1, 2}));
  std::filesystem::remove(path);
}

// ---- bad options, another strategy's scope

TEST(VariableIdentity, OutOfRangeEnumsAreInvalidArguments) {
  MirroredStrategy strategy(cpu_devices(2));
  expect_error<InvalidArgumentError>(
      [&] { make_variable(strategy, 1.0f, {.name = "v", .aggregation = static_cast<VariableAggregation>(7)}); },
      {"Variable 'v': invalid variable aggregation mode 7; use NONE, SUM, MEAN or ONLY_FIRST_REPLICA"});
  expect_error<InvalidArgumentError>(
      [&] {
        make_variable(strategy, 1.0f, {.name = "v", .synchronization = static_cast<VariableSynchronization>(-1)});
      },
      {"Variable 'v': invalid variable synchronization mode -1; use AUTO, NONE, ON_WRITE or ON_READ"});
}

TEST(VariableIdentity, AssigningUnderAnotherStrategysScopeIsAFailedPrecondition) {
  MirroredStrategy s(cpu_devices(2));
  MirroredStrategy t(cpu_devices(3));
  Variable v = make_variable(s, 1.0f, {.name = "v"});
  {
    StrategyScope scope = t.scope();
    expect_error<FailedPreconditionError>(
        [&] { v.assign(2.0f); },
        {"Variable 'v': assign: Mixing different distribute::Strategy objects: the variable was created for "
         "MirroredStrategy(CPU:0, CPU:1) but this thread is in the cross-replica context of MirroredStrategy(CPU:0, "
         "CPU:1, CPU:2)"});
  }
  EXPECT_EQ(v.component(0).item<float>(), 1.0f);
  // Its own scope, or none, is fine.
  v.assign(3.0f);
  {
    StrategyScope scope = s.scope();
    v.assign_add(1.0f);
  }
  EXPECT_EQ(v.component(1).item<float>(), 4.0f);
}

}  // namespace
}  // namespace distribute
