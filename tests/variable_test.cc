// Variable: creation for the strategy in scope (one component per replica device), reads in
// replica and cross-replica context, updates of every synchronization and aggregation in both
// contexts with the expected values (and their generalisation to 1-4 replicas), the NONE
// check across replicas, misuse that must end in a typed error rather than a hang, every error
// message, TF-style printing, and StrategyExtended::update / variable_created_in_scope /
// experimental_local_results for variables.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"
#include "testing/semantics_util.h"
#include "testing/variables.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::current_test_name;
using testing::expect_error;
using testing::make_variable;
using testing::printed;
using testing::replica_id;
using testing::Watchdog;

constexpr std::chrono::milliseconds kHangLimit{20000};

// The components of a scalar variable, in replica order.
template <class T = float>
std::vector<T> scalars(const Variable& v) {
  std::vector<T> out;
  for (int i = 0; i < v.num_components(); ++i) out.push_back(v.component(i).item<T>());
  return out;
}

template <class T>
std::vector<T> repeated(T value, int n) {
  return std::vector<T>(static_cast<std::size_t>(n), value);
}


class Variables : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }

 private:
  Watchdog watchdog_{kHangLimit, current_test_name()};
};

INSTANTIATE_TEST_SUITE_P(Replicas, Variables, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "replicas"; });

class Variable2 : public ::testing::Test {
 protected:
  MirroredStrategy strategy{cpu_devices(2)};

 private:
  Watchdog watchdog_{kHangLimit, current_test_name()};
};

// ---- creation

TEST_P(Variables, CreatedUnderScopeHasOneCopyPerReplicaDevice) {
  MirroredStrategy strategy(cpu_devices(n()));
  const Tensor initial = Tensor::from_vector<float>({1, 2, 3});
  const Variable v = make_variable(strategy, initial, {.name = "w"});
  ASSERT_EQ(v.num_components(), n());
  EXPECT_EQ(v.name(), "w");
  EXPECT_EQ(v.dtype(), DType::kFloat32);
  EXPECT_EQ(v.shape(), Shape{3});
  EXPECT_TRUE(v.trainable());
  EXPECT_EQ(v.synchronization(), VariableSynchronization::kOnWrite);  // AUTO
  EXPECT_EQ(v.aggregation(), VariableAggregation::kNone);
  EXPECT_EQ(&v.distribute_strategy(), &strategy);
  for (int i = 0; i < n(); ++i) {
    EXPECT_EQ(v.component(i).device(), Device::cpu(i));
    EXPECT_EQ(v.component(i).to_vector<float>(), (std::vector<float>{1, 2, 3}));
    EXPECT_FALSE(v.component(i).same_storage(initial)) << "a copy, not the initial value";
    for (int j = 0; j < i; ++j) EXPECT_FALSE(v.component(i).same_storage(v.component(j)));
  }
  EXPECT_TRUE(strategy.extended().variable_created_in_scope(v));
  EXPECT_FALSE(get_strategy().extended().variable_created_in_scope(v));
  const std::vector<Tensor> local = strategy.experimental_local_results(v);
  ASSERT_EQ(local.size(), static_cast<std::size_t>(n()));
  for (int i = 0; i < n(); ++i) EXPECT_TRUE(local[static_cast<std::size_t>(i)].same_storage(v.component(i)));
}

TEST(Variable, WithoutScopeOrUnderOneDeviceStrategyHasOneComponent) {
  const Variable v(2.5f);
  EXPECT_EQ(v.num_components(), 1);
  EXPECT_EQ(v.name(), "Variable");
  EXPECT_EQ(&v.distribute_strategy(), &get_strategy());
  EXPECT_TRUE(get_strategy().extended().variable_created_in_scope(v));
  EXPECT_EQ(v.value().item<float>(), 2.5f);

  OneDeviceStrategy one("CPU:1");
  const Variable w = make_variable(one, std::int64_t{7});
  EXPECT_EQ(w.num_components(), 1);
  EXPECT_EQ(w.dtype(), DType::kInt64);
  EXPECT_EQ(w.component(0).device(), Device::cpu(1));
  EXPECT_TRUE(one.extended().variable_created_in_scope(w));
  EXPECT_FALSE(one.extended().variable_created_in_scope(v));
}

TEST(Variable, HandlesShareTheVariable) {
  Variable a(1.0f);
  const Variable b = a;
  const Variable c(1.0f);
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  a.assign(4.0f);
  EXPECT_EQ(b.value().item<float>(), 4.0f);
  EXPECT_EQ(c.value().item<float>(), 1.0f);
  EXPECT_FALSE(Variable().defined());
  EXPECT_TRUE(a.defined());
}

TEST_P(Variables, CreatedInsideRunIsOneMirroredVariableWithReplicaZerosValue) {
  MirroredStrategy strategy(cpu_devices(n()));
  // A lazily built layer: the first step creates its weight, every replica holds the same one.
  PerReplica<Variable> made = strategy.run([] {
    Variable w(Tensor::from_vector<float>({replica_id<float>() + 1, 7}), {.name = "w", .aggregation = VariableAggregation::kSum});
    w.assign_add(Tensor::from_vector<float>({1, 1}));
    return w;
  });
  for (int r = 0; r < n(); ++r) EXPECT_TRUE(made[r] == made[0]);
  const Variable& w = made[0];
  EXPECT_EQ(w.name(), "w");
  EXPECT_EQ(w.num_components(), n());
  EXPECT_TRUE(w.trainable());
  EXPECT_TRUE(strategy.extended().variable_created_in_scope(w));
  // Replica 0's [1, 7], plus the SUM of every replica's [1, 1].
  const float n_f = static_cast<float>(n());
  for (int i = 0; i < n(); ++i) EXPECT_EQ(w.component(i).to_vector<float>(), (std::vector<float>{1 + n_f, 7 + n_f}));
}

TEST_F(Variable2, CreationInsideRunMustMatchOnEveryReplica) {
  expect_error<InvalidArgumentError>(
      [&] { strategy.run([] { Variable v(1.0f, {.name = replica_id<float>() == 0 ? "a" : "b"}); }); },
      {"merge_call #1: replica 0 called create of 'a' where replica 1 called create of 'b'"});
  expect_error<InvalidArgumentError>(
      [&] { strategy.run([] { Variable v(Tensor::zeros(DType::kFloat32, Shape{replica_id<std::int64_t>() + 1}), {.name = "w"}); }); },
      {"Variable 'w': created inside run with an initial value of float32[1] on replica 0 but float32[2] on replica 1",
       "every replica must create it with the same dtype and shape"});
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] {
          Variable v(1.0f, {.name = "w", .trainable = replica_id<float>() == 0});
        });
      },
      {"Variable 'w': created inside run with other options on replica 1 than on replica 0"});
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([] {
          if (replica_id<float>() == 0) Variable v(1.0f, {.name = "w"});
        });
      },
      {"replica 1 returned from the replica function while replica 0 waits in merge_call for create of 'w'"});
}

TEST_F(Variable2, CreationErrors) {
  StrategyScope scope = strategy.scope();
  expect_error<InvalidArgumentError>([] { Variable v(Tensor(), {.name = "w"}); },
                                     {"Variable 'w': the initial value is an undefined Tensor"});
  expect_error<InvalidArgumentError>(
      [] {
        Variable v(1.0f, {.name = "m", .trainable = true, .synchronization = VariableSynchronization::kOnRead,
                          .aggregation = VariableAggregation::kSum});
      },
      {"Variable 'm': synchronization ON_READ is only for variables that are not trainable, and trainable is true"});
  expect_error<InvalidArgumentError>(
      [] { Variable v(3, {.name = "c", .aggregation = VariableAggregation::kMean}); },
      {"Variable 'c': aggregation MEAN needs a floating-point dtype and the initial value is int32",
       "use SUM or ONLY_FIRST_REPLICA"});
  expect_error<InvalidArgumentError>(
      [] { Variable v(1.0f, {.name = "s", .synchronization = VariableSynchronization::kNone}); },
      {"Variable 's': synchronization NONE is not supported by MirroredStrategy(CPU:0, CPU:1), which has 2 "
       "replicas"});
}

TEST(Variable, SynchronizationNoneWithOneReplicaBehavesAsOnWrite) {
  Variable v(1.0f, {.synchronization = VariableSynchronization::kNone});
  EXPECT_EQ(v.synchronization(), VariableSynchronization::kNone);
  v.assign_add(2.0f);
  EXPECT_EQ(v.value().item<float>(), 3.0f);
}

TEST(Variable, UndefinedVariableAndComponentOutOfRange) {
  const Variable undefined;
  expect_error<FailedPreconditionError>([&] { (void)undefined.value(); },
                                        {"Variable::value: the variable is undefined (default-constructed)"});
  expect_error<FailedPreconditionError>([&] { (void)undefined.name(); }, {"Variable::name: the variable is undefined"});
  const Variable v(1.0f, {.name = "w"});
  expect_error<OutOfRangeError>([&] { (void)v.component(1); },
                                {"Variable 'w': component 1 does not exist; the variable has 1 components"});
  expect_error<OutOfRangeError>([&] { (void)v.component(-1); }, {"Variable 'w': component -1 does not exist"});
  EXPECT_EQ(printed(undefined), "<Variable: undefined>");
}

// ---- reading

TEST_P(Variables, ValueInReplicaContextIsTheReplicasOwnComponent) {
  MirroredStrategy strategy(cpu_devices(n()));
  const Variable v = make_variable(strategy, 1.0f);
  PerReplica<bool> own = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    return v.value().same_storage(v.component(r));
  });
  for (int r = 0; r < n(); ++r) EXPECT_TRUE(own[r]) << r;
}

TEST_P(Variables, CrossReplicaReadOfOnWriteIsComponentZero) {
  MirroredStrategy strategy(cpu_devices(n()));
  const Variable v = make_variable(strategy, 1.0f);
  EXPECT_TRUE(v.value().same_storage(v.component(0)));
  StrategyScope scope = strategy.scope();
  EXPECT_TRUE(v.value().same_storage(v.component(0)));
}

TEST_P(Variables, CrossReplicaReadOfOnReadIsTheAggregate) {
  MirroredStrategy strategy(cpu_devices(n()));
  auto on_read = [&](VariableAggregation aggregation) {
    Variable v = make_variable(strategy, 0.0f,
                               {.synchronization = VariableSynchronization::kOnRead, .aggregation = aggregation});
    strategy.run([&] { v.assign(replica_id<float>() + 1); });  // components 1, 2, ..., n
    return v.value().item<float>();
  };
  const float n = static_cast<float>(this->n());
  EXPECT_EQ(on_read(VariableAggregation::kSum), n * (n + 1) / 2);
  EXPECT_EQ(on_read(VariableAggregation::kMean), (n + 1) / 2);
  EXPECT_EQ(on_read(VariableAggregation::kOnlyFirstReplica), 1.0f);
}

TEST_P(Variables, ReadValueIsACopyThatLaterUpdatesDoNotChange) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable v = make_variable(strategy, 1.0f);
  const Tensor value = v.value();
  const Tensor copy = v.read_value();
  v.assign(2.0f);
  EXPECT_EQ(value.item<float>(), 2.0f) << "value() shows later updates";
  EXPECT_EQ(copy.item<float>(), 1.0f);
  Variable m = make_variable(strategy, 1.0f,
                             {.synchronization = VariableSynchronization::kOnRead,
                              .aggregation = VariableAggregation::kSum});
  const Tensor sum = m.read_value();
  m.assign(8.0f);
  EXPECT_EQ(sum.item<float>(), static_cast<float>(n()));
}

// ---- updates in replica context: the expected values (2 replicas)

TEST_F(Variable2, MeanAssignOfReplicaIdsGivesHalf) {
  Variable v = make_variable(strategy, 1.0f, {.aggregation = VariableAggregation::kMean});
  strategy.run([&] { v.assign(replica_id<float>()); });
  EXPECT_EQ(scalars(v), (std::vector<float>{0.5f, 0.5f}));
}

TEST_F(Variable2, MeanAssignAddOfReplicaIdsGivesOneAndAHalf) {
  Variable v = make_variable(strategy, 1.0f, {.aggregation = VariableAggregation::kMean});
  strategy.run([&] { v.assign_add(replica_id<float>()); });
  EXPECT_EQ(scalars(v), (std::vector<float>{1.5f, 1.5f}));
}

TEST_F(Variable2, MeanAssignSubOfReplicaIdsFromFiveGivesFourAndAHalf) {
  Variable v = make_variable(strategy, 5.0f, {.aggregation = VariableAggregation::kMean});
  strategy.run([&] { v.assign_sub(replica_id<float>()); });
  EXPECT_EQ(scalars(v), (std::vector<float>{4.5f, 4.5f}));
}

TEST_F(Variable2, OnReadOnlyFirstReplicaKeepsEachReplicasUpdateAndReadsTheFirst) {
  Variable v = make_variable(strategy, 2.0f,
                             {.synchronization = VariableSynchronization::kOnRead,
                              .aggregation = VariableAggregation::kOnlyFirstReplica});
  strategy.run([&] { v.assign_add(5 * (replica_id<float>() + 1)); });
  EXPECT_EQ(scalars(v), (std::vector<float>{7.0f, 12.0f}));
  EXPECT_EQ(v.value().item<float>(), 7.0f);
}

TEST_F(Variable2, OnWriteOnlyFirstReplicaAppliesReplicaZerosValueEverywhere) {
  Variable v = make_variable(strategy, 3.0f, {.aggregation = VariableAggregation::kOnlyFirstReplica});
  strategy.run([&] { v.assign_add(7 * (replica_id<float>() + 1)); });
  EXPECT_EQ(scalars(v), (std::vector<float>{10.0f, 10.0f}));
}

// ---- updates in replica context: 1-4 replicas

TEST_P(Variables, OnWriteSumAndMeanReduceThenUpdateEveryComponent) {
  MirroredStrategy strategy(cpu_devices(n()));
  const float n = static_cast<float>(this->n());
  const float sum_of_ids = n * (n - 1) / 2;
  Variable sum = make_variable(strategy, 1.0f, {.aggregation = VariableAggregation::kSum});
  Variable mean = make_variable(strategy, 1.0f, {.aggregation = VariableAggregation::kMean});
  Variable mean_sub = make_variable(strategy, 5.0f, {.aggregation = VariableAggregation::kMean});
  Variable assigned = make_variable(strategy, 1.0f, {.aggregation = VariableAggregation::kMean});
  strategy.run([&] {
    sum.assign_add(replica_id<float>());
    mean.assign_add(replica_id<float>());
    mean_sub.assign_sub(replica_id<float>());
    assigned.assign(replica_id<float>());
  });
  EXPECT_EQ(scalars(sum), repeated(1 + sum_of_ids, this->n()));
  EXPECT_EQ(scalars(mean), repeated(1 + sum_of_ids / n, this->n()));
  EXPECT_EQ(scalars(mean_sub), repeated(5 - sum_of_ids / n, this->n()));
  EXPECT_EQ(scalars(assigned), repeated(sum_of_ids / n, this->n()));
}

TEST_P(Variables, OnWriteSumOfTensorsAndManySteps) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable v = make_variable(strategy, Tensor::zeros(DType::kFloat64, Shape{2, 2}),
                             {.aggregation = VariableAggregation::kSum});
  constexpr int kSteps = 20;
  strategy.run([&] {
    const double r = replica_id<float>();
    for (int step = 0; step < kSteps; ++step) {
      v.assign_add(Tensor::from_vector<double>({r, 1, 2 * r, -1}, Shape{2, 2}));
    }
  });
  const double ids = n() * (n() - 1) / 2.0;
  for (int i = 0; i < n(); ++i) {
    EXPECT_EQ(v.component(i).to_vector<double>(),
              (std::vector<double>{kSteps * ids, kSteps * 1.0 * n(), kSteps * 2 * ids, -kSteps * 1.0 * n()}));
  }
}

TEST_P(Variables, OnWriteOnlyFirstReplicaAndNone) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable first = make_variable(strategy, 3.0f, {.aggregation = VariableAggregation::kOnlyFirstReplica});
  Variable none = make_variable(strategy, 3.0f);
  strategy.run([&] {
    first.assign_add(7 * (replica_id<float>() + 1));
    none.assign_sub(2.0f);
    none.assign(Tensor::scalar<float>(8.0f));
  });
  EXPECT_EQ(scalars(first), repeated(10.0f, n()));
  EXPECT_EQ(scalars(none), repeated(8.0f, n()));
}

TEST_P(Variables, OnReadUpdatesOnlyTheReplicasOwnComponent) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable v = make_variable(strategy, 10, {.synchronization = VariableSynchronization::kOnRead,
                                            .aggregation = VariableAggregation::kSum});
  strategy.run([&] { v.assign_add(get_replica_context()->replica_id_in_sync_group() + 1); });
  std::vector<int> expected;
  int total = 0;
  for (int r = 0; r < n(); ++r) {
    expected.push_back(11 + r);
    total += 11 + r;
  }
  EXPECT_EQ(scalars<int>(v), expected);
  EXPECT_EQ(v.value().item<int>(), total);
}

TEST_P(Variables, ManyReplicaUpdatesOfSeveralKindsStayConsistent) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable sum = make_variable(strategy, 0.0f, {.aggregation = VariableAggregation::kSum});
  Variable first = make_variable(strategy, 0.0f, {.aggregation = VariableAggregation::kOnlyFirstReplica});
  Variable counter = make_variable(strategy, 0, {.synchronization = VariableSynchronization::kOnRead,
                                                 .aggregation = VariableAggregation::kSum});
  constexpr int kSteps = 50;
  for (int run = 0; run < 3; ++run) {
    strategy.run([&] {
      for (int step = 0; step < kSteps; ++step) {
        sum.assign_add(1.0f);
        first.assign_add(replica_id<float>() + 1);
        counter.assign_add(1);
        EXPECT_EQ(sum.value().item<float>(), first.value().item<float>() * static_cast<float>(n()));
      }
    });
  }
  EXPECT_EQ(scalars(sum), repeated(3.0f * kSteps * static_cast<float>(n()), n()));
  EXPECT_EQ(scalars(first), repeated(3.0f * kSteps, n()));
  EXPECT_EQ(counter.value().item<int>(), 3 * kSteps * n());
}

// ---- updates in cross-replica context

TEST_P(Variables, CrossReplicaUpdateOfOnWriteWritesEveryComponent) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable v = make_variable(strategy, Tensor::from_vector<float>({1, 2}), {.aggregation = VariableAggregation::kSum});
  {
    StrategyScope scope = strategy.scope();
    v.assign_add(Tensor::from_vector<float>({10, 20}));
  }
  v.assign_sub(Tensor::from_vector<float>({1, 1}));  // the default context: cross-replica too
  for (int i = 0; i < n(); ++i) EXPECT_EQ(v.component(i).to_vector<float>(), (std::vector<float>{10, 21}));
}

TEST_P(Variables, CrossReplicaUpdateInsideMergeFnWritesEveryComponent) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable v = make_variable(strategy, 1.0f);
  strategy.run([&] { get_replica_context()->merge_call([&](Strategy&) { v.assign_add(4.0f); }); });
  EXPECT_EQ(scalars(v), repeated(5.0f, n()));
}

TEST_P(Variables, CrossReplicaAssignOfOnReadSumSplitsTheValueSoTheReadGivesIt) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable v = make_variable(strategy, 0.0f, {.synchronization = VariableSynchronization::kOnRead,
                                              .aggregation = VariableAggregation::kSum});
  v.assign(8.0f);
  EXPECT_EQ(scalars(v), repeated(8.0f / static_cast<float>(n()), n()));
  EXPECT_NEAR(v.value().item<float>(), 8.0f, 1e-5f);
  Variable i = make_variable(strategy, 0, {.synchronization = VariableSynchronization::kOnRead,
                                           .aggregation = VariableAggregation::kSum});
  i.assign(7);
  std::vector<int> expected(static_cast<std::size_t>(n()), 0);
  expected[0] = 7;
  EXPECT_EQ(scalars<int>(i), expected);
  EXPECT_EQ(i.value().item<int>(), 7);
}

TEST_P(Variables, CrossReplicaUpdatesOfOnReadMeanAndOnlyFirstGoToEveryComponent) {
  MirroredStrategy strategy(cpu_devices(n()));
  for (VariableAggregation aggregation : {VariableAggregation::kMean, VariableAggregation::kOnlyFirstReplica}) {
    Variable v = make_variable(strategy, 1.0f,
                               {.synchronization = VariableSynchronization::kOnRead, .aggregation = aggregation});
    v.assign(4.0f);
    EXPECT_EQ(scalars(v), repeated(4.0f, n()));
    v.assign_add(2.0f);
    v.assign_sub(1.0f);
    EXPECT_EQ(scalars(v), repeated(5.0f, n()));
    EXPECT_EQ(v.value().item<float>(), 5.0f);
  }
}

TEST_F(Variable2, CrossReplicaAssignAddOfOnReadSumIsAFailedPrecondition) {
  Variable v = make_variable(strategy, 1.0f, {.name = "total",
                                              .synchronization = VariableSynchronization::kOnRead,
                                              .aggregation = VariableAggregation::kSum});
  expect_error<FailedPreconditionError>(
      [&] { v.assign_add(1.0f); },
      {"Variable 'total': assign_add of an ON_READ variable with aggregation SUM is not supported in cross-replica "
       "context", "call it inside the fn passed to Strategy::run, or use assign"});
  expect_error<FailedPreconditionError>([&] { v.assign_sub(1.0f); }, {"Variable 'total': assign_sub of an ON_READ"});
  EXPECT_EQ(scalars(v), (std::vector<float>{1.0f, 1.0f}));
}

// ---- checks

TEST_F(Variable2, WrongDTypeOrShapeNamesTheVariableAndBothTypes) {
  Variable v = make_variable(strategy, Tensor::from_vector<float>({1, 2}), {.name = "w"});
  expect_error<InvalidArgumentError>([&] { v.assign(Tensor::from_vector<double>({1, 2})); },
                                     {"Variable 'w': assign got a value of dtype float64 but the variable has dtype "
                                      "float32"});
  expect_error<InvalidArgumentError>([&] { v.assign_add(Tensor::from_vector<float>({1, 2, 3})); },
                                     {"Variable 'w': assign_add got a value of shape (3,) but the variable has shape "
                                      "(2,)"});
  expect_error<InvalidArgumentError>([&] { v.assign_sub(Tensor()); },
                                     {"Variable 'w': assign_sub got an undefined Tensor"});
  // In replica context: every replica raises before any collective.
  expect_error<InvalidArgumentError>([&] { strategy.run([&] { v.assign(Tensor::scalar<float>(1.0f)); }); },
                                     {"Variable 'w': assign got a value of shape () but the variable has shape (2,)"});
  EXPECT_EQ(v.component(1).to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST_F(Variable2, ScalarsAreConvertedOnlyWhenTheDTypeHoldsThemExactly) {
  Variable f = make_variable(strategy, 1.0f, {.name = "f"});
  f.assign(3);  // an int, as TF takes a Python int for a float variable
  EXPECT_EQ(scalars(f), (std::vector<float>{3.0f, 3.0f}));
  f.assign_add(0.5);
  EXPECT_EQ(scalars(f), (std::vector<float>{3.5f, 3.5f}));
  Variable i = make_variable(strategy, 1, {.name = "i"});
  i.assign(4.0);
  EXPECT_EQ(scalars<int>(i), (std::vector<int>{4, 4}));
  expect_error<InvalidArgumentError>(
      [&] { i.assign(0.5); },
      {"Variable 'i': assign got the float64 value 0.5, which the variable's dtype int32 cannot hold exactly",
       "pass a int32 value"});
  expect_error<InvalidArgumentError>([&] { i.assign_add(1e10); },
                                     {"Variable 'i': assign_add got the float64 value 10000000000.0"});
  expect_error<InvalidArgumentError>([&] { f.assign_sub(0.1); },
                                     {"Variable 'f': assign_sub got the float64 value 0.1, which the variable's dtype "
                                      "float32 cannot hold exactly"});
  EXPECT_EQ(scalars<int>(i), (std::vector<int>{4, 4}));
}

TEST_F(Variable2, NoneAggregationWithEqualValuesUpdatesEveryComponent) {
  Variable v = make_variable(strategy, Tensor::from_vector<float>({1, 2}));
  strategy.run([&] { v.assign_add(Tensor::from_vector<float>({3, 4})); });
  for (int i = 0; i < 2; ++i) EXPECT_EQ(v.component(i).to_vector<float>(), (std::vector<float>{4, 6}));
}

TEST(Variable, NoneAggregationWithDifferentValuesNamesTheReplicasAndChangesNothing) {
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(4));
  Variable v = make_variable(strategy, 1.0f, {.name = "w"});
  const std::string what = expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          const int r = get_replica_context()->replica_id_in_sync_group();
          v.assign(r % 2 == 1 ? 2.0f : 1.0f);
        });
      },
      {"Variable 'w': assign with aggregation NONE in replica context needs the same value on every replica, but "
       "replicas 1, 3 passed another value than replica 0",
       "give the variable an aggregation (SUM, MEAN, ONLY_FIRST_REPLICA) or pass equal values"});
  EXPECT_FALSE(what.empty());
  EXPECT_EQ(scalars(v), repeated(1.0f, 4));
  // The strategy and the variable are usable afterwards.
  strategy.run([&] { v.assign(6.0f); });
  EXPECT_EQ(scalars(v), repeated(6.0f, 4));
}

TEST_F(Variable2, NoneAggregationOfEmptyTensors) {
  Variable v = make_variable(strategy, Tensor::zeros(DType::kFloat32, Shape{0, 3}));
  strategy.run([&] { v.assign(Tensor::zeros(DType::kFloat32, Shape{0, 3})); });
  EXPECT_EQ(v.component(1).shape(), (Shape{0, 3}));
}

TEST_F(Variable2, ReplicasUpdatingDifferentVariablesInOneMergeCallIsAnError) {
  Variable a = make_variable(strategy, 1.0f, {.name = "a"});
  Variable b = make_variable(strategy, 1.0f, {.name = "b"});
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          if (get_replica_context()->replica_id_in_sync_group() == 0) {
            a.assign(2.0f);
          } else {
            b.assign_add(2.0f);
          }
        });
      },
      {"merge_call #1: replica 0 called assign of 'a' where replica 1 called assign_add of 'b'",
       "every replica must make the same updates in the same order"});
  EXPECT_EQ(scalars(a), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(scalars(b), (std::vector<float>{1.0f, 1.0f}));
}

TEST(Variable, AReplicaThatSkipsAnUpdateEndsTheRunWithATypedError) {
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(3));
  Variable v = make_variable(strategy, 0.0f, {.aggregation = VariableAggregation::kSum});
  expect_error<FailedPreconditionError>(
      [&] {
        strategy.run([&] {
          if (get_replica_context()->replica_id_in_sync_group() != 1) v.assign_add(1.0f);
        });
      },
      {"replica 1 returned from the replica function while replicas 0, 2 wait in all_reduce"});
  strategy.run([&] { v.assign_add(1.0f); });
  EXPECT_EQ(scalars(v), repeated(3.0f, 3));
}

TEST(Variable, AReplicaPassingAnotherShapeEndsTheRunWithItsError) {
  Watchdog watchdog(kHangLimit, current_test_name());
  MirroredStrategy strategy(cpu_devices(3));
  Variable v = make_variable(strategy, Tensor::from_vector<float>({0, 0}), {.name = "w",
                                                                          .aggregation = VariableAggregation::kMean});
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          const bool odd = get_replica_context()->replica_id_in_sync_group() == 2;
          v.assign_add(odd ? Tensor::from_vector<float>({1, 2, 3}) : Tensor::from_vector<float>({1, 2}));
        });
      },
      {"Variable 'w': assign_add got a value of shape (3,) but the variable has shape (2,)"});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(v.component(i).to_vector<float>(), (std::vector<float>{0, 0}));
}

TEST_F(Variable2, UsingAVariableInAReplicaOfAnotherStrategyIsAFailedPrecondition) {
  MirroredStrategy other(cpu_devices(3));
  Variable v = make_variable(strategy, 1.0f, {.name = "w"});
  expect_error<FailedPreconditionError>(
      [&] { other.run([&] { v.assign_add(1.0f); }); },
      {"Variable 'w': assign_add called in a replica of MirroredStrategy(CPU:0, CPU:1, CPU:2) but the variable was "
       "created for MirroredStrategy(CPU:0, CPU:1)",
       "use a variable created under the scope of the strategy that runs the step"});
  expect_error<FailedPreconditionError>([&] { other.run([&] { (void)v.value(); }); },
                                        {"Variable 'w': value called in a replica of"});
}

// As TF reads a plain tf.Variable inside strategy.run: a variable made outside every strategy's
// scope (the default strategy's) is read as it is in another strategy's replicas, through every
// read, and later updates outside run show in the next run; writing it inside run stays an error
// naming the variable and the strategy, and changes nothing.
TEST_F(Variable2, AVariableMadeOutsideEveryStrategyIsReadInsideRunButNotWritten) {
  Variable plain(Tensor::from_vector<float>({1, 2}), {.name = "plain"});
  const std::vector<float> initial{1, 2};
  const PerReplica<std::vector<float>> values = strategy.run([&] { return plain.value().to_vector<float>(); });
  const PerReplica<std::vector<float>> copies = strategy.run([&] { return plain.read_value().to_vector<float>(); });
  // A read is a tensor like any other: here summed across the replicas.
  const PerReplica<std::vector<float>> sums = strategy.run([&] {
    return get_replica_context()->all_reduce(ReduceOp::kSum, plain.value().to(get_replica_context()->device()))
        .to_vector<float>();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(values[r], initial) << "replica " << r;
    EXPECT_EQ(copies[r], initial) << "replica " << r;
    EXPECT_EQ(sums[r], (std::vector<float>{2, 4})) << "replica " << r;
  }
  plain.assign(Tensor::from_vector<float>({3, 4}));
  EXPECT_EQ(strategy.run([&] { return plain.value().to_vector<float>(); })[1], (std::vector<float>{3, 4}));
  OneDeviceStrategy one("CPU:1");
  EXPECT_EQ(one.run([&] { return plain.value().to_vector<float>(); })[0], (std::vector<float>{3, 4}));

  expect_error<FailedPreconditionError>(
      [&] { strategy.run([&] { plain.assign_add(Tensor::from_vector<float>({1, 1})); }); },
      {"Variable 'plain': assign_add called in a replica of MirroredStrategy(CPU:0, CPU:1) but the variable was "
       "made outside every strategy's scope (for the DefaultStrategy): inside run it can be read, not written, "
       "since every replica would write its one copy; create it under the scope of the strategy that runs the "
       "step, or update it outside run"});
  expect_error<FailedPreconditionError>(
      [&] { strategy.run([&] { plain.assign(Tensor::from_vector<float>({5, 5})); }); },
      {"Variable 'plain': assign called in a replica of MirroredStrategy(CPU:0, CPU:1)"});
  expect_error<FailedPreconditionError>(
      [&] { one.run([&] { plain.assign_sub(Tensor::from_vector<float>({1, 1})); }); },
      {"Variable 'plain': assign_sub called in a replica of OneDeviceStrategy(CPU:1)",
       "inside run it can be read, not written"});
  EXPECT_EQ(plain.value().to_vector<float>(), (std::vector<float>{3, 4}));
}

// TF's ReduceOp.from_variable_aggregation: the aggregations that combine values map to their op;
// the others, and values outside the enum, are an InvalidArgumentError saying why.
TEST(Variable, ReduceOpFromVariableAggregation) {
  EXPECT_EQ(reduce_op_from_variable_aggregation(VariableAggregation::kSum), ReduceOp::kSum);
  EXPECT_EQ(reduce_op_from_variable_aggregation(VariableAggregation::kMean), ReduceOp::kMean);
  expect_error<InvalidArgumentError>(
      [] { reduce_op_from_variable_aggregation(VariableAggregation::kNone); },
      {"reduce_op_from_variable_aggregation: aggregation NONE has no ReduceOp: its updates combine no values (they "
       "take the one value every replica passes); only SUM and MEAN map to a ReduceOp (kSum, kMean)"});
  expect_error<InvalidArgumentError>(
      [] { reduce_op_from_variable_aggregation(VariableAggregation::kOnlyFirstReplica); },
      {"reduce_op_from_variable_aggregation: aggregation ONLY_FIRST_REPLICA has no ReduceOp: its updates combine "
       "no values (they take replica 0's value); only SUM and MEAN map to a ReduceOp (kSum, kMean)"});
  expect_error<InvalidArgumentError>(
      [] { reduce_op_from_variable_aggregation(static_cast<VariableAggregation>(7)); },
      {"reduce_op_from_variable_aggregation: 7 is no VariableAggregation; use SUM or MEAN"});
}

// ---- printing

TEST_F(Variable2, PrintsLikeTf) {
  const Variable w = make_variable(strategy, Tensor::from_vector<float>({1, 2}), {.name = "w"});
  EXPECT_EQ(printed(w),
            "MirroredVariable:{\n"
            "  0: <Variable 'w:0' shape=(2,) dtype=float32, numpy=[1.0, 2.0]>,\n"
            "  1: <Variable 'w/replica_1:0' shape=(2,) dtype=float32, numpy=[1.0, 2.0]>\n"
            "}");
  Variable m = make_variable(strategy, 0, {.name = "count",
                                           .synchronization = VariableSynchronization::kOnRead,
                                           .aggregation = VariableAggregation::kSum});
  strategy.run([&] { m.assign(get_replica_context()->replica_id_in_sync_group() + 3); });
  EXPECT_EQ(printed(m),
            "SyncOnReadVariable:{\n"
            "  0: <Variable 'count:0' shape=() dtype=int32, numpy=3>,\n"
            "  1: <Variable 'count/replica_1:0' shape=() dtype=int32, numpy=4>\n"
            "}");
  EXPECT_EQ(printed(Variable(1.0f, {.name = "w"})), "<Variable 'w:0' shape=() dtype=float32, numpy=1.0>");
  EXPECT_EQ(printed(Variable(Tensor::from_vector<double>({1, 2, 3, 4}, Shape{2, 2}))),
            "<Variable 'Variable:0' shape=(2, 2) dtype=float64, numpy=\n[[1.0, 2.0],\n [3.0, 4.0]]>");
  EXPECT_EQ(printed(VariableSynchronization::kOnRead), "ON_READ");
  EXPECT_EQ(printed(VariableAggregation::kOnlyFirstReplica), "ONLY_FIRST_REPLICA");
  EXPECT_EQ(std::string(synchronization_name(VariableSynchronization::kAuto)), "AUTO");
  EXPECT_EQ(std::string(aggregation_name(VariableAggregation::kMean)), "MEAN");
}

// ---- StrategyExtended::update

TEST_P(Variables, ExtendedUpdateCallsFnForEachComponentWithItsArguments) {
  MirroredStrategy strategy(cpu_devices(n()));
  Variable v = make_variable(strategy, 1.0f);
  const PerReplica<float> deltas = strategy.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return static_cast<float>(ctx.replica_id_in_sync_group()); });
  StrategyScope scope = strategy.scope();
  strategy.extended().update(v, [](Tensor& c, float delta, float scale) { c.flat<float>() += delta * scale; }, deltas,
                             10.0f);
  const Mirrored<float> values =
      strategy.extended().update(v, [](const Tensor& c) { return c.item<float>(); });
  for (int i = 0; i < n(); ++i) {
    EXPECT_EQ(v.component(i).item<float>(), 1.0f + 10.0f * static_cast<float>(i));
    EXPECT_EQ(values[i], v.component(i).item<float>());
  }
}

TEST_F(Variable2, OnReadVariablesAreNotTrainableUnlessSaid) {
  const Variable metric = make_variable(strategy, 0.0f, {.synchronization = VariableSynchronization::kOnRead,
                                                         .aggregation = VariableAggregation::kSum});
  EXPECT_FALSE(metric.trainable());
  const Variable weight = make_variable(strategy, 0.0f);
  EXPECT_TRUE(weight.trainable());
  const Variable frozen = make_variable(strategy, 0.0f, {.trainable = false});
  EXPECT_FALSE(frozen.trainable());
}

TEST_F(Variable2, OnReadWithAggregationNoneIsReadInsideRunOnly) {
  Variable counter = make_variable(strategy, 0, {.name = "counter", .synchronization = VariableSynchronization::kOnRead});
  EXPECT_EQ(counter.aggregation(), VariableAggregation::kNone);
  strategy.run([&] { counter.assign_add(replica_id<float>() + 1); });
  const PerReplica<int> read = strategy.run([&] { return counter.value().item<int>(); });
  EXPECT_EQ(read.values(), (std::vector<int>{1, 2}));
  expect_error<InvalidArgumentError>(
      [&] { counter.value(); },
      {"Variable 'counter': an ON_READ variable with aggregation NONE cannot be read in cross-replica context",
       "read it inside the fn passed to Strategy::run, read component(i), or give it an aggregation"});
  // Assignments in cross-replica context reach every component.
  counter.assign(5);
  counter.assign_add(1);
  EXPECT_EQ(counter.component(0).item<int>(), 6);
  EXPECT_EQ(counter.component(1).item<int>(), 6);
}

TEST_F(Variable2, WritesThroughTheVariableInsideUpdateReachTheUpdatedComponent) {
  Variable total = make_variable(strategy, 0.0f, {.name = "total", .synchronization = VariableSynchronization::kOnRead,
                                                  .aggregation = VariableAggregation::kSum});
  Variable w = make_variable(strategy, 1.0f, {.name = "w"});
  const PerReplica<float> deltas({10.0f, 20.0f});
  StrategyScope scope = strategy.scope();
  const Mirrored<float> seen = strategy.extended().update(
      total,
      [&](Tensor&, float delta) {
        total.assign(delta);  // not divided by the replicas: this component only
        w.assign_add(delta);  // another variable of the strategy: its component being updated too
        return total.value().item<float>();
      },
      deltas);
  EXPECT_EQ(seen.values(), (std::vector<float>{10.0f, 20.0f}));
  EXPECT_EQ(total.component(0).item<float>(), 10.0f);
  EXPECT_EQ(total.component(1).item<float>(), 20.0f);
  EXPECT_EQ(total.value().item<float>(), 30.0f);
  EXPECT_EQ(w.component(0).item<float>(), 11.0f);
  EXPECT_EQ(w.component(1).item<float>(), 21.0f);
  // Outside update, a cross-replica assign of an ON_READ SUM variable is shared out again.
  total.assign(4.0f);
  EXPECT_EQ(total.component(1).item<float>(), 2.0f);
}

TEST_F(Variable2, ExtendedUpdateErrors) {
  Variable v = make_variable(strategy, 1.0f, {.name = "w"});
  MirroredStrategy other(cpu_devices(3));
  expect_error<InvalidArgumentError>(
      [&] { other.extended().update(v, [](Tensor&) {}); },
      {"extended().update: variable 'w' was created for MirroredStrategy(CPU:0, CPU:1), not for "
       "MirroredStrategy(CPU:0, CPU:1, CPU:2)"});
  expect_error<InvalidArgumentError>(
      [&] { strategy.extended().update(v, [](Tensor&, int) {}, PerReplica<int>({1, 2, 3})); },
      {"extended().update: argument 1 holds values for 3 replicas but variable 'w' has 2 components"});
  expect_error<FailedPreconditionError>(
      [&] { strategy.run([&] { strategy.extended().update(v, [](Tensor&) {}); }); },
      {"extended().update requires being in cross-replica context"});
}

}  // namespace
}  // namespace distribute
