// Which context a thread is in and what each context offers: the default strategy and its replica
// context with no setup, strategy scopes (cross-replica context, nesting), the replica context
// inside run, OneDevice and default-device Mirrored strategies, persistent replica threads, how run
// passes arguments and returns results, and the cross-replica Strategy / StrategyExtended
// operations in scope and in the default context. Exceptions from replicas reaching the caller are
// in context_test_replica_errors.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "distribute/distribute.h"
#include "context_test.h"
#include "testing/replica_harness.h"
#include "testing/semantics_util.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::expect_default_context;
using testing::expect_error;

// What a replica saw of its context, recorded inside run.
struct Observed {
  int id = -1;
  int num = -1;
  const Strategy* context_strategy = nullptr;
  const Strategy* current_strategy = nullptr;
  const ReplicaContext* context = nullptr;
  const Strategy* cross_replica = nullptr;
  bool in_cross_replica = true;
  bool has = false;
  std::thread::id thread;
};

Observed observe() {
  Observed o;
  ReplicaContext* ctx = get_replica_context();
  o.context = ctx;
  if (ctx != nullptr) {
    o.id = ctx->replica_id_in_sync_group();
    o.num = ctx->num_replicas_in_sync();
    o.context_strategy = &ctx->strategy();
  }
  o.current_strategy = &get_strategy();
  o.cross_replica = get_cross_replica_context();
  o.in_cross_replica = in_cross_replica_context();
  o.has = has_strategy();
  o.thread = std::this_thread::get_id();
  return o;
}

// ---------------------------------------------------------------------------------------------
// The default strategy and its replica context.

TEST(DefaultContext, ExistsWithoutSetup) {
  expect_default_context();
  Strategy& strategy = get_strategy();
  EXPECT_EQ(strategy.num_replicas_in_sync(), 1);
  EXPECT_EQ(strategy.name(), "DefaultStrategy");
  // The default strategy is one object for the whole process, not made afresh per call.
  EXPECT_EQ(&get_strategy(), &strategy);
  EXPECT_EQ(get_replica_context(), get_replica_context());
}

TEST(DefaultContext, ExistsOnEveryThread) {
  Observed seen;
  std::thread([&] { seen = observe(); }).join();
  EXPECT_NE(seen.context, nullptr);
  EXPECT_EQ(seen.id, 0);
  EXPECT_EQ(seen.num, 1);
  EXPECT_EQ(seen.current_strategy, &get_strategy());
  EXPECT_EQ(seen.context_strategy, &get_strategy());
  EXPECT_EQ(seen.cross_replica, nullptr);
  EXPECT_FALSE(seen.in_cross_replica);
  EXPECT_FALSE(seen.has);
}

TEST(DefaultContext, CollectivesReturnTheReplicasOwnValue) {
  ReplicaContext& ctx = *get_replica_context();
  EXPECT_EQ(ctx.all_reduce(ReduceOp::kSum, 3.5), 3.5);
  EXPECT_EQ(ctx.all_reduce(ReduceOp::kMean, std::int32_t{7}), 7);
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2});
  Tensor summed = ctx.all_reduce("sum", t);
  EXPECT_EQ(summed.shape(), (Shape{2, 2}));
  EXPECT_EQ(summed.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  Tensor gathered = ctx.all_gather(t, 1);
  EXPECT_EQ(gathered.shape(), (Shape{2, 2}));
  EXPECT_EQ(gathered.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(DefaultContext, DefaultStrategyRunsOnTheCallingThread) {
  PerReplica<Observed> seen = get_strategy().run(observe);
  ASSERT_EQ(seen.num_replicas(), 1);
  EXPECT_EQ(seen[0].id, 0);
  EXPECT_EQ(seen[0].num, 1);
  EXPECT_EQ(seen[0].thread, std::this_thread::get_id());
  EXPECT_EQ(seen[0].context_strategy, &get_strategy());
  expect_default_context();
}

// ---------------------------------------------------------------------------------------------
// Scopes.

TEST(Scope, EntersTheStrategysCrossReplicaContext) {
  MirroredStrategy strategy(cpu_devices(2));
  {
    StrategyScope scope = strategy.scope();
    EXPECT_EQ(&scope.strategy(), &strategy);
    EXPECT_EQ(get_replica_context(), nullptr);
    EXPECT_EQ(get_cross_replica_context(), &strategy);
    EXPECT_TRUE(in_cross_replica_context());
    EXPECT_TRUE(has_strategy());
    EXPECT_EQ(&get_strategy(), &strategy);
  }
  expect_default_context();
}

TEST(Scope, ScopesOfTheSameStrategyNest) {
  MirroredStrategy strategy(cpu_devices(3));
  {
    StrategyScope outer = strategy.scope();
    {
      StrategyScope inner = strategy.scope();
      EXPECT_EQ(get_cross_replica_context(), &strategy);
      EXPECT_EQ(&get_strategy(), &strategy);
      StrategyScope innermost = strategy.scope();
      EXPECT_EQ(get_cross_replica_context(), &strategy);
    }
    // Leaving the inner scopes keeps the outer one.
    EXPECT_EQ(get_replica_context(), nullptr);
    EXPECT_EQ(get_cross_replica_context(), &strategy);
    EXPECT_TRUE(has_strategy());
  }
  expect_default_context();
}

TEST(Scope, RunInsideScopeThenScopeIsIntact) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  PerReplica<Observed> seen = strategy.run(observe);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(seen[r].id, r);
    EXPECT_EQ(seen[r].context_strategy, &strategy);
    EXPECT_FALSE(seen[r].in_cross_replica);
  }
  EXPECT_EQ(get_replica_context(), nullptr);
  EXPECT_EQ(get_cross_replica_context(), &strategy);
}

// A StrategyScope is movable; the moved-to guard must still leave the scope when destroyed.
// Runs on its own thread so that a scope left behind cannot leak into the other tests.
TEST(Scope, MovedScopeLeavesOnDestruction) {
  MirroredStrategy strategy(cpu_devices(2));
  const Strategy* inside = nullptr;
  const Strategy* after = &strategy;
  std::thread([&] {
    std::optional<StrategyScope> holder;
    holder.emplace(strategy.scope());
    inside = get_cross_replica_context();
    holder.reset();
    after = get_cross_replica_context();
  }).join();
  EXPECT_EQ(inside, &strategy);
  EXPECT_EQ(after, nullptr);
}

// A scope destroyed on a thread that did not enter it used to be accepted silently, leaving the
// entering thread in the scope. Each thread here is a new one, so no scope leaks into other tests.
TEST(Scope, DestroyedOnAnotherThreadIsAFailedPrecondition) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope* scope = nullptr;
  const Strategy* inside = nullptr;
  std::thread([&] {
    scope = new StrategyScope(strategy.scope());
    inside = get_cross_replica_context();
  }).join();
  EXPECT_EQ(inside, &strategy);
  expect_error<FailedPreconditionError>(
      [&] { delete scope; },
      {"StrategyScope: destroyed on a thread that did not enter it",
       "that thread stays in the strategy's cross-replica context",
       "Destroy a scope on the thread that called Strategy::scope()"});
  EXPECT_EQ(get_cross_replica_context(), nullptr) << "this thread never entered the scope";

  // While an exception propagates, the destructor must not throw (that would end the program).
  std::thread([&] { scope = new StrategyScope(strategy.scope()); }).join();
  struct DeletesWhileUnwinding {
    StrategyScope* scope;
    ~DeletesWhileUnwinding() noexcept(false) { delete scope; }
  };
  EXPECT_THROW(
      {
        DeletesWhileUnwinding holder{scope};
        throw std::runtime_error("unwinding");
      },
      std::runtime_error);
}

// Moving a scope on another thread keeps it the entering thread's: destroyed back there, it leaves
// the scope (the move used to lose track of it, leaving that thread in the scope).
TEST(Scope, MovedOnAnotherThreadStillLeavesOnTheEnteringThread) {
  MirroredStrategy strategy(cpu_devices(2));
  std::atomic<int> phase{0};
  StrategyScope* entered = nullptr;
  StrategyScope* moved = nullptr;
  const Strategy* inside = nullptr;
  const Strategy* after = &strategy;
  std::thread entering([&] {
    entered = new StrategyScope(strategy.scope());
    inside = get_cross_replica_context();
    phase = 1;
    while (phase != 2) std::this_thread::yield();
    delete moved;
    after = get_cross_replica_context();
  });
  while (phase != 1) std::this_thread::yield();
  moved = new StrategyScope(std::move(*entered));
  delete entered;  // moved from: nothing to leave, on any thread
  phase = 2;
  entering.join();
  EXPECT_EQ(inside, &strategy);
  EXPECT_EQ(after, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Inside run.

class RunContext : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Replicas, RunContext, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "replicas"; });

TEST_P(RunContext, EachReplicaIsInItsOwnReplicaContext) {
  MirroredStrategy strategy(cpu_devices(n()));
  EXPECT_EQ(strategy.num_replicas_in_sync(), n());
  PerReplica<Observed> seen = strategy.run(observe);
  ASSERT_EQ(seen.num_replicas(), n());
  std::set<const ReplicaContext*> contexts;
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(seen[r].id, r);
    EXPECT_EQ(seen[r].num, n());
    EXPECT_EQ(seen[r].context_strategy, &strategy);
    EXPECT_EQ(seen[r].current_strategy, &strategy);
    EXPECT_EQ(seen[r].cross_replica, nullptr);
    EXPECT_FALSE(seen[r].in_cross_replica);
    EXPECT_TRUE(seen[r].has);
    contexts.insert(seen[r].context);
  }
  EXPECT_EQ(contexts.size(), static_cast<std::size_t>(n()));
  expect_default_context();
}

TEST_P(RunContext, OneProcessIsTheOnlyWorkerAndItsChief) {
  MirroredStrategy strategy(cpu_devices(n()));
  const StrategyExtended& extended = strategy.extended();
  EXPECT_EQ(extended.num_workers(), 1);
  EXPECT_EQ(extended.worker_id(), 0);
  EXPECT_EQ(extended.num_local_replicas(), n());
  EXPECT_FALSE(extended.in_multi_worker_mode());
  EXPECT_TRUE(extended.should_checkpoint());
  EXPECT_TRUE(extended.should_save_summary());
  EXPECT_FALSE(extended.experimental_between_graph());
  EXPECT_TRUE(extended.experimental_should_init());
  const InputContext input = extended.input_context();
  EXPECT_EQ(input.num_input_pipelines(), 1);
  EXPECT_EQ(input.input_pipeline_id(), 0);
  EXPECT_EQ(input.num_replicas_in_sync(), n());
  PerReplica<int> local_ids = strategy.run([] { return get_replica_context()->local_replica_id(); });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(local_ids[r], r);
}

// As TensorFlow defines them: one program drives the replicas of these strategies (not between
// graphs), and their one worker initialises its variables.
TEST(StrategyExtended, BetweenGraphAndShouldInitOfOneProcessStrategies) {
  MirroredStrategy mirrored(cpu_devices(2));
  OneDeviceStrategy one_device("CPU:0");
  for (const Strategy* strategy : {static_cast<const Strategy*>(&mirrored), static_cast<const Strategy*>(&one_device),
                                   static_cast<const Strategy*>(&get_strategy())}) {
    SCOPED_TRACE(strategy->name());
    EXPECT_FALSE(strategy->extended().experimental_between_graph());
    EXPECT_TRUE(strategy->extended().experimental_should_init());
  }
}

TEST_P(RunContext, ReplicaContextReportsItsDevice) {
  MirroredStrategy strategy(cpu_devices(n()));
  PerReplica<Device> devices = strategy.run([] { return get_replica_context()->device(); });
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(devices[r], Device::cpu(r));
    EXPECT_EQ(strategy.extended().worker_devices()[static_cast<std::size_t>(r)], Device::cpu(r));
  }
}

TEST_P(RunContext, ReplicaThreadsArePersistent) {
  MirroredStrategy strategy(cpu_devices(n()));
  PerReplica<std::thread::id> first = strategy.run([] { return std::this_thread::get_id(); });
  std::set<std::thread::id> distinct(first.values().begin(), first.values().end());
  EXPECT_EQ(distinct.size(), static_cast<std::size_t>(n()));
  for (int i = 0; i < 50; ++i) {
    PerReplica<std::thread::id> again = strategy.run([] { return std::this_thread::get_id(); });
    ASSERT_EQ(again.values(), first.values()) << "run " << i << " used other threads";
  }
}

// Replica 0 runs on the caller's thread (which would only wait otherwise); every other replica on
// a thread of its own, the same one from run to run.
TEST(Run, MirroredReplicaZeroRunsOnTheCallersThread) {
  MirroredStrategy strategy(cpu_devices(3));
  PerReplica<std::thread::id> ids = strategy.run([] { return std::this_thread::get_id(); });
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  EXPECT_NE(ids[1], std::this_thread::get_id());
  EXPECT_NE(ids[2], std::this_thread::get_id());
  EXPECT_NE(ids[1], ids[2]);
  PerReplica<std::thread::id> again = strategy.run([] { return std::this_thread::get_id(); });
  EXPECT_EQ(again.values(), ids.values());
  std::thread([&] {
    PerReplica<std::thread::id> elsewhere = strategy.run([] { return std::this_thread::get_id(); });
    EXPECT_EQ(elsewhere[0], std::this_thread::get_id());
    EXPECT_EQ(elsewhere[1], ids[1]);
  }).join();
  expect_default_context();
}

TEST(Run, OneDeviceStrategyRunsOnTheCallingThread) {
  OneDeviceStrategy strategy("CPU:0");
  EXPECT_EQ(strategy.num_replicas_in_sync(), 1);
  EXPECT_EQ(strategy.extended().worker_devices(), std::vector<Device>{Device::cpu(0)});
  PerReplica<Observed> seen = strategy.run(observe);
  ASSERT_EQ(seen.num_replicas(), 1);
  EXPECT_EQ(seen[0].thread, std::this_thread::get_id());
  EXPECT_EQ(seen[0].id, 0);
  EXPECT_EQ(seen[0].num, 1);
  EXPECT_EQ(seen[0].context_strategy, &strategy);
  EXPECT_EQ(seen[0].current_strategy, &strategy);
  EXPECT_TRUE(seen[0].has);
  EXPECT_FALSE(seen[0].in_cross_replica);
  PerReplica<double> reduced = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 2.5); });
  EXPECT_EQ(reduced[0], 2.5);
  expect_default_context();
}

TEST(Run, MirroredStrategyWithoutDevicesHasOneCpuReplica) {
  MirroredStrategy strategy;
  EXPECT_EQ(strategy.num_replicas_in_sync(), 1);
  EXPECT_EQ(strategy.extended().worker_devices(), std::vector<Device>{Device::cpu(0)});
  PerReplica<Observed> seen = strategy.run(observe);
  ASSERT_EQ(seen.num_replicas(), 1);
  EXPECT_EQ(seen[0].id, 0);
  EXPECT_EQ(seen[0].num, 1);
  EXPECT_EQ(seen[0].context_strategy, &strategy);
  PerReplica<std::int64_t> reduced =
      strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kMean, std::int64_t{9}); });
  EXPECT_EQ(reduced[0], 9);
}

// PerReplica<bool> holds a std::vector<bool>, whose elements are not addressable objects; indexing
// must still give each replica's value.
TEST(Run, BoolResultsCanBeIndexed) {
  MirroredStrategy strategy(cpu_devices(4));
  PerReplica<bool> odd = strategy.run([] { return get_replica_context()->replica_id_in_sync_group() % 2 == 1; });
  EXPECT_EQ(odd.values(), (std::vector<bool>{false, true, false, true}));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(bool(odd[r]), r % 2 == 1) << r;
}

TEST(Run, RunWithVoidFnReturnsVoid) {
  MirroredStrategy strategy(cpu_devices(3));
  std::atomic<int> calls{0};
  auto fn = [&] { calls.fetch_add(1); };
  static_assert(std::is_void_v<decltype(strategy.run(fn))>);
  strategy.run(fn);
  strategy.run(fn);
  EXPECT_EQ(calls.load(), 6);
}

TEST(Run, PassesComponentsOfDistributedArgumentsAndPlainArgumentsAsTheyAre) {
  MirroredStrategy strategy(cpu_devices(3));
  PerReplica<int> ids({10, 11, 12});
  Mirrored<std::string> name(std::string("weights"), 3);
  PerReplica<Tensor> tensors({Tensor::from_vector<float>({0}), Tensor::from_vector<float>({1, 1}),
                              Tensor::from_vector<float>({2, 2, 2})});
  const std::vector<int> plain{7, 8};
  auto result = strategy.run(
      [&](int id, const std::string& n, const Tensor& t, const std::vector<int>& p) {
        const int r = get_replica_context()->replica_id_in_sync_group();
        // The plain argument is the caller's object itself, not a copy.
        const bool same_object = &p == &plain;
        return std::make_tuple(id - 10 == r, n, t.num_elements() == r + 1 && t.to_vector<float>()[0] == float(r),
                               same_object);
      },
      ids, name, tensors, plain);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(std::get<0>(result[r])) << r;
    EXPECT_EQ(std::get<1>(result[r]), "weights");
    EXPECT_TRUE(std::get<2>(result[r])) << r;
    EXPECT_TRUE(std::get<3>(result[r])) << r;
  }
}

TEST(Run, DistributedArgumentForAnotherReplicaCountIsRejected) {
  MirroredStrategy strategy(cpu_devices(2));
  PerReplica<int> three({1, 2, 3});
  expect_error<InvalidArgumentError>([&] { strategy.run([](int) {}, three); },
                                          {"argument 0", "3 replicas", "has 2"});
}

TEST(Run, ExperimentalLocalResults) {
  MirroredStrategy strategy(cpu_devices(3));
  PerReplica<int> ids = strategy.run([] { return get_replica_context()->replica_id_in_sync_group() * 2; });
  EXPECT_EQ(strategy.experimental_local_results(ids), (std::vector<int>{0, 2, 4}));
  Mirrored<double> same(1.5, 3);
  EXPECT_EQ(strategy.experimental_local_results(same), (std::vector<double>{1.5, 1.5, 1.5}));
  EXPECT_EQ(strategy.experimental_local_results(42), std::vector<int>{42});
}

TEST(Run, DistributeValuesFromFunction) {
  MirroredStrategy strategy(cpu_devices(4));
  PerReplica<Tensor> values = strategy.experimental_distribute_values_from_function([](const ValueContext& ctx) {
    return Tensor::from_vector<std::int32_t>({ctx.replica_id_in_sync_group(), ctx.num_replicas_in_sync()});
  });
  ASSERT_EQ(values.num_replicas(), 4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(values[r].to_vector<std::int32_t>(), (std::vector<std::int32_t>{r, 4}));
  // Each replica receives its own value when it is passed to run.
  PerReplica<std::int32_t> firsts = strategy.run([](const Tensor& t) { return t.to_vector<std::int32_t>()[0]; }, values);
  EXPECT_EQ(firsts.values(), (std::vector<std::int32_t>{0, 1, 2, 3}));
}

// ---------------------------------------------------------------------------------------------
// Cross-replica operations, in the strategy's scope and in the default context (no scope).

// Holds a scope without moving it: the member is initialised from scope()'s result in place.
struct ScopeHolder {
  explicit ScopeHolder(Strategy& strategy) : scope(strategy.scope()) {}
  StrategyScope scope;
};

class CrossReplicaOps : public ::testing::TestWithParam<bool> {
 protected:
  CrossReplicaOps() : strategy_(cpu_devices(3)) {
    if (GetParam()) scope_.emplace(strategy_);
  }
  // Three replicas; replica r holds [r+1, 2(r+1)].
  PerReplica<Tensor> per_replica() {
    std::vector<Tensor> values;
    for (int r = 0; r < 3; ++r) values.push_back(Tensor::from_vector<float>({float(r + 1), float(2 * (r + 1))}));
    return PerReplica<Tensor>(std::move(values));
  }

  MirroredStrategy strategy_;
  std::optional<ScopeHolder> scope_;
};

INSTANTIATE_TEST_SUITE_P(Contexts, CrossReplicaOps, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "InScope" : "Default"; });

TEST_P(CrossReplicaOps, ContextIsAsExpected) {
  if (GetParam()) {
    EXPECT_EQ(get_cross_replica_context(), &strategy_);
  } else {
    expect_default_context();
  }
}

TEST_P(CrossReplicaOps, ReduceTensors) {
  PerReplica<Tensor> v = per_replica();
  Tensor sum = strategy_.reduce(ReduceOp::kSum, v, std::nullopt);
  EXPECT_EQ(sum.shape(), Shape{2});
  EXPECT_EQ(sum.device(), Device::cpu());
  EXPECT_EQ(sum.to_vector<float>(), (std::vector<float>{6, 12}));
  EXPECT_EQ(strategy_.reduce(ReduceOp::kMean, v, std::nullopt).to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(strategy_.reduce("Sum", v, std::nullopt).to_vector<float>(), (std::vector<float>{6, 12}));
  // With an axis: also across each component's elements.
  EXPECT_EQ(strategy_.reduce(ReduceOp::kSum, v, 0).item<float>(), 18.0f);
  EXPECT_EQ(strategy_.reduce("mean", v, -1).item<float>(), 3.0f);
}

TEST_P(CrossReplicaOps, ReduceUnevenBatchesAlongAnAxisWeighsByElementCount) {
  // Replica r has r+1 rows of two columns: 1..2, 3..6, 7..12.
  std::vector<Tensor> values;
  int next = 1;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::int64_t> rows;
    for (int i = 0; i < 2 * (r + 1); ++i) rows.push_back(next++);
    values.push_back(Tensor::from_vector<std::int64_t>(rows, Shape{r + 1, 2}));
  }
  PerReplica<Tensor> v(std::move(values));
  EXPECT_EQ(strategy_.reduce(ReduceOp::kSum, v, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{36, 42}));
  EXPECT_EQ(strategy_.reduce(ReduceOp::kMean, v, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{6, 7}));
}

TEST_P(CrossReplicaOps, ReduceScalars) {
  PerReplica<std::int32_t> ints({1, 2, 4});
  EXPECT_EQ(strategy_.reduce(ReduceOp::kSum, ints, std::nullopt), 7);
  EXPECT_EQ(strategy_.reduce(ReduceOp::kMean, ints, std::nullopt), 2);  // 7 / 3 truncates
  PerReplica<double> doubles({1, 2, 4});
  EXPECT_EQ(strategy_.reduce(ReduceOp::kMean, doubles, std::nullopt), 7.0 / 3.0);
  Mirrored<std::int64_t> mirrored(std::int64_t{5}, 3);
  EXPECT_EQ(strategy_.reduce(ReduceOp::kMean, mirrored, std::nullopt), 5);
}

TEST_P(CrossReplicaOps, ReduceValuesThatAreNotDistributed) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2});
  EXPECT_EQ(strategy_.reduce(ReduceOp::kMean, t, std::nullopt).to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(strategy_.reduce(ReduceOp::kMean, t, 0).to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(strategy_.reduce(ReduceOp::kMean, 2.5, std::nullopt), 2.5);
  expect_error<InvalidArgumentError>([&] { strategy_.reduce(ReduceOp::kSum, t, std::nullopt); },
                                          {"not distributed", "SUM", "3 replicas"});
}

TEST_P(CrossReplicaOps, Gather) {
  PerReplica<Tensor> v = per_replica();
  Tensor along0 = strategy_.gather(v, 0);
  EXPECT_EQ(along0.shape(), Shape{6});
  EXPECT_EQ(along0.to_vector<float>(), (std::vector<float>{1, 2, 2, 4, 3, 6}));
  std::vector<Tensor> columns;
  for (int r = 0; r < 3; ++r) columns.push_back(Tensor::from_vector<float>({float(r), float(10 + r)}, Shape{2, 1}));
  Tensor along1 = strategy_.gather(PerReplica<Tensor>(columns), 1);
  EXPECT_EQ(along1.shape(), (Shape{2, 3}));
  EXPECT_EQ(along1.to_vector<float>(), (std::vector<float>{0, 1, 2, 10, 11, 12}));
}

TEST_P(CrossReplicaOps, ExtendedReduceToADevice) {
  Tensor sum = strategy_.extended().reduce_to(ReduceOp::kSum, per_replica(), Device::cpu(2));
  EXPECT_EQ(sum.device(), Device::cpu(2));
  EXPECT_EQ(sum.to_vector<float>(), (std::vector<float>{6, 12}));
  Tensor mean = strategy_.extended().reduce_to(ReduceOp::kMean, per_replica(), Device::cpu(0));
  EXPECT_EQ(mean.to_vector<float>(), (std::vector<float>{2, 4}));
}

TEST_P(CrossReplicaOps, ExtendedReduceToTheDevicesOfDestinations) {
  std::vector<Tensor> destinations;
  for (int r = 0; r < 3; ++r) destinations.push_back(Tensor::zeros(DType::kFloat32, Shape{2}, Device::cpu(r)));
  Mirrored<Tensor> reduced =
      strategy_.extended().reduce_to(ReduceOp::kSum, per_replica(), Mirrored<Tensor>(destinations));
  ASSERT_EQ(reduced.num_replicas(), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(reduced[r].device(), Device::cpu(r));
    EXPECT_EQ(reduced[r].to_vector<float>(), (std::vector<float>{6, 12}));
  }
}

TEST_P(CrossReplicaOps, ExtendedBatchReduceTo) {
  std::vector<Tensor> ints;
  for (int r = 0; r < 3; ++r) ints.push_back(Tensor::from_vector<std::int32_t>({r, r * r}));
  std::vector<std::pair<DistributedValues<Tensor>, Device>> pairs{
      {per_replica(), Device::cpu(1)}, {PerReplica<Tensor>(ints), Device::cpu(0)}};
  std::vector<Tensor> sums = strategy_.extended().batch_reduce_to(ReduceOp::kSum, pairs);
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_EQ(sums[0].device(), Device::cpu(1));
  EXPECT_EQ(sums[0].to_vector<float>(), (std::vector<float>{6, 12}));
  EXPECT_EQ(sums[1].device(), Device::cpu(0));
  EXPECT_EQ(sums[1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, 5}));
  std::vector<Tensor> means = strategy_.extended().batch_reduce_to(ReduceOp::kMean, pairs);
  EXPECT_EQ(means[0].to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(means[1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 1}));  // 3/3, 5/3 truncated
}

TEST_P(CrossReplicaOps, ExtendedGatherTo) {
  Tensor gathered = strategy_.extended().gather_to(per_replica(), Device::cpu(1), 0);
  EXPECT_EQ(gathered.device(), Device::cpu(1));
  EXPECT_EQ(gathered.to_vector<float>(), (std::vector<float>{1, 2, 2, 4, 3, 6}));
}

TEST_P(CrossReplicaOps, ExtendedUpdateCallsFnOnEveryComponent) {
  std::vector<Tensor> components;
  for (int r = 0; r < 3; ++r) components.push_back(Tensor::from_vector<float>({1, 2}, Shape{2}, Device::cpu(r)));
  Mirrored<Tensor> var(components);
  Mirrored<Tensor> doubled = strategy_.extended().update(var, [](const Tensor& t) {
    Tensor out = t.clone();
    out.flat<float>() *= 2.0f;
    return out;
  });
  ASSERT_EQ(doubled.num_replicas(), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(doubled[r].device(), Device::cpu(r));
    EXPECT_EQ(doubled[r].to_vector<float>(), (std::vector<float>{2, 4}));
  }
  std::set<int> devices;
  strategy_.extended().update(var, [&](const Tensor& t) { devices.insert(t.device().index()); });
  EXPECT_EQ(devices, (std::set<int>{0, 1, 2}));
}

TEST(DefaultStrategyOps, ReduceAndGatherOnTheDefaultStrategy) {
  Strategy& strategy = get_strategy();
  Tensor t = Tensor::from_vector<float>({1, 2, 3});
  // One replica: SUM of a value that is not distributed is the value itself.
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, t, std::nullopt).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, t, 0).item<float>(), 6.0f);
  EXPECT_EQ(strategy.gather(PerReplica<Tensor>({t}), 0).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, PerReplica<int>({4}), std::nullopt), 4);
}

// A scope guard that outlives its strategy leaves nothing dangling on its thread.
TEST(ScopeLifetime, DestroyedStrategyLeavesNoScopeBehind) {
  std::thread([] {
    auto strategy = std::make_unique<MirroredStrategy>(testing::cpu_devices(2));
    auto scope = std::make_unique<StrategyScope>(strategy->scope());
    EXPECT_EQ(&get_strategy(), strategy.get());
    strategy.reset();
    EXPECT_FALSE(has_strategy());
    EXPECT_NE(get_replica_context(), nullptr);
    scope.reset();
    EXPECT_FALSE(has_strategy());
  }).join();
}

}  // namespace
}  // namespace distribute

