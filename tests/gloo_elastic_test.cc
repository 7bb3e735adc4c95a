// Elastic MultiWorkerMirroredStrategy (ElasticOptions, distribute/elastic/elastic.h) in forked
// processes: the options and states it refuses, a job of one worker through run_elastic, and two
// workers that form a generation, train and change it. Jobs whose workers are killed, stopped or
// added while they train are tests/elastic_test.sh's.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/elastic/elastic.h"
#include "distribute/strategy/multi_worker_mirrored_strategy.h"
#include "testing/forked_workers.h"

namespace distribute {
namespace {

using namespace std::chrono_literals;
using testing::run_workers;
using testing::StoreDirectory;

// The options of worker `rank` of `workers`, meeting at `store`, elastic with min_workers 1.
MultiWorkerMirroredStrategyOptions elastic_options(const std::string& store, int rank, int workers) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(workers).c_str(), 1);
  unsetenv("DISTRIBUTE_JOB_ID");
  MultiWorkerMirroredStrategyOptions options;
  options.local_devices = {"CPU:0", "CPU:1"};
  options.backend = CollectiveBackend::kGloo;
  options.communication.timeout = 20s;
  options.gloo.rendezvous = store.empty() ? "" : "file://" + store;
  options.elastic.min_workers = 1;
  return options;
}

template <class Fn>
std::string invalid_argument(Fn&& fn) {
  try {
    fn();
    return "no error";
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
}

TEST(GlooElastic, OptionsThatCannotHoldAreRefusedSayingWhatToGive) {
  StoreDirectory store;
  run_workers(1, [&](int) {
    MultiWorkerMirroredStrategyOptions options = elastic_options(store.path(), 0, 1);
    options.elastic.min_workers = 3;
    options.elastic.max_workers = 2;
    EXPECT_EQ(invalid_argument([&] { MultiWorkerMirroredStrategy strategy(options); }),
              "MultiWorkerMirroredStrategy: options.elastic has min_workers 3 and max_workers 2; give 1 <= "
              "min_workers <= max_workers (max_workers 0: no limit)");
    options.elastic.min_workers = 0;  // max_workers alone asks for an elastic job too
    EXPECT_EQ(invalid_argument([&] { MultiWorkerMirroredStrategy strategy(options); }),
              "MultiWorkerMirroredStrategy: options.elastic has min_workers 0 and max_workers 2; give 1 <= "
              "min_workers <= max_workers (max_workers 0: no limit)");
    options.elastic = {.min_workers = 1, .settle_time = 0ms};
    EXPECT_EQ(invalid_argument([&] { MultiWorkerMirroredStrategy strategy(options); }),
              "MultiWorkerMirroredStrategy: options.elastic.settle_time is 0 ms; give a positive time (1 s by "
              "default)");
    options.elastic = {.min_workers = 1};
    options.backend = CollectiveBackend::kMpi;
    const std::string refusal = invalid_argument([&] { MultiWorkerMirroredStrategy strategy(options); });
#if DISTRIBUTE_HAS_MPI
    EXPECT_EQ(refusal,
              "MultiWorkerMirroredStrategy: options.elastic needs the Gloo backend, whose workers meet at a "
              "rendezvous store and can change; this strategy chose MPI (MPI's ranks are fixed for the job): set "
              "options.backend to kGloo and start the workers without mpirun");
#else
    EXPECT_NE(refusal.find("options.backend is kMpi"), std::string::npos) << refusal;
#endif
    options = elastic_options("", 0, 1);
    unsetenv("DISTRIBUTE_RENDEZVOUS");
    EXPECT_EQ(invalid_argument([&] { MultiWorkerMirroredStrategy strategy(options); }),
              "MultiWorkerMirroredStrategy over Gloo: an elastic job's workers meet at a rendezvous store, and none "
              "is given: set options.gloo.rendezvous or DISTRIBUTE_RENDEZVOUS to redis://HOST:PORT (a redis-server "
              "every worker reaches) or file:///DIR (a directory every worker shares)");
  });
}

TEST(GlooElastic, AStateOrLoopThatIsNotTheElasticStrategysIsRefused) {
  StoreDirectory store;
  run_workers(1, [&](int) {
    MultiWorkerMirroredStrategyOptions plain = elastic_options("", 0, 1);
    plain.elastic = {};
    unsetenv("DISTRIBUTE_RENDEZVOUS");
    MultiWorkerMirroredStrategy fixed(plain);
    Variable v = [&] {
      StrategyScope scope = fixed.scope();
      return Variable(1.0f, {.name = "v"});
    }();
    EXPECT_EQ(invalid_argument([&] { ElasticState state(fixed, Checkpoint({{"v", v}})); }),
              "ElasticState: MultiWorkerMirroredStrategy(worker 0 of 1 over Gloo: CPU:0, CPU:1) is not elastic; set "
              "options.elastic.min_workers (and max_workers) when constructing it");

    MultiWorkerMirroredStrategy elastic(elastic_options(store.path(), 0, 1));
    EXPECT_TRUE(elastic.elastic());
    EXPECT_FALSE(fixed.elastic());
    EXPECT_EQ(invalid_argument([&] { ElasticState state(elastic, Checkpoint({{"v", v}})); }),
              "ElasticState: variable 'v' was not created under the scope of MultiWorkerMirroredStrategy(worker 0 "
              "of 1 over Gloo: CPU:0, CPU:1); give the state only that strategy's variables");
    Variable w = [&] {
      StrategyScope scope = elastic.scope();
      return Variable(1.0f, {.name = "w"});
    }();
    ElasticState state(elastic, Checkpoint({{"w", w}}));
    EXPECT_EQ(invalid_argument([&] { run_elastic(fixed, state, [] {}); }),
              "run_elastic: MultiWorkerMirroredStrategy(worker 0 of 1 over Gloo: CPU:0, CPU:1) is not elastic; set "
              "options.elastic.min_workers when constructing it");
  });
}

// One worker: its first generation reported, commits that keep the progress, a commit inside a
// replica's fn refused, and a program's error from the loop passed on as it is (no worker is lost).
TEST(GlooElastic, AJobOfOneWorkerTrainsThroughRunElasticAndPassesOnItsOwnErrors) {
  StoreDirectory store;
  run_workers(1, [&](int) {
    MultiWorkerMirroredStrategyOptions options = elastic_options(store.path(), 0, 1);
    std::vector<MembershipChange> changes;
    options.elastic.on_membership_change = [&](const MembershipChange& change) { changes.push_back(change); };
    MultiWorkerMirroredStrategy strategy(options);
    ASSERT_EQ(changes.size(), 1u);
    EXPECT_EQ(changes[0].generation, 0);
    EXPECT_EQ(changes[0].num_workers, 1);
    EXPECT_EQ(changes[0].reason, "the job started");
    EXPECT_TRUE(changes[0].joined.empty() && changes[0].left.empty());
    EXPECT_EQ(strategy.generation(), 0);
    Variable w = [&] {
      StrategyScope scope = strategy.scope();
      return Variable(0.0f, {.name = "w"});
    }();
    ElasticState state(strategy, Checkpoint({{"w", w}}));
    run_elastic(strategy, state, [&] {
      while (state.progress.step < 3) {
        strategy.run([&] { w.assign_add(get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f)); });
        ++state.progress.step;
        state.commit();
      }
    });
    EXPECT_EQ(state.committed().step, 3);
    EXPECT_EQ(state.commits(), 3);
    EXPECT_EQ(w.value().item<float>(), 6.0f);

    try {
      strategy.run([&] { state.commit(); });
      ADD_FAILURE() << "no error";
    } catch (const FailedPreconditionError& e) {
      EXPECT_EQ(std::string(e.what()),
                "ElasticState::commit: called inside a replica's fn; commit at a step boundary, in cross-replica "
                "context");
    }
    EXPECT_EQ(invalid_argument([&] {
                run_elastic(strategy, state, [] { throw InvalidArgumentError("the program's own error"); });
              }),
              "the program's own error");
    EXPECT_EQ(changes.size(), 1u);
  });
}

// Two workers whose second one leaves its loop early: the first forms the next generation alone and
// goes on from the last commit, with the state it kept.
TEST(GlooElastic, AWorkerThatLeavesIsLeftBehindAndTheOtherGoesOnFromTheLastCommit) {
  StoreDirectory store;
  run_workers(2, [&](int rank) {
    MultiWorkerMirroredStrategyOptions options = elastic_options(store.path(), rank, 2);
    options.communication.timeout = 5s;
    std::vector<MembershipChange> changes;
    options.elastic.on_membership_change = [&](const MembershipChange& change) { changes.push_back(change); };
    auto strategy = std::make_unique<MultiWorkerMirroredStrategy>(options);
    EXPECT_EQ(strategy->num_replicas_in_sync(), 4);
    Variable w = [&] {
      StrategyScope scope = strategy->scope();
      return Variable(0.0f, {.name = "w"});
    }();
    ElasticState state(*strategy, Checkpoint({{"w", w}}));
    if (rank == 1) {
      run_elastic(*strategy, state, [&] {
        strategy->run([&] { w.assign_add(get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f)); });
        ++state.progress.step;
        state.commit();
      });
      return;  // its strategy goes: worker 0 finds it gone
    }
    const std::string trace = store.path() + "/trace.json";
    Timeline::start(trace);
    run_elastic(*strategy, state, [&] {
      while (state.progress.step < 4) {
        strategy->run([&] { w.assign_add(get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f)); });
        ++state.progress.step;
        state.commit();
      }
    });
    // An elastic job's workers change, so each writes its own trace, with the change in it.
    EXPECT_TRUE(Timeline::stop());
    std::ifstream file(trace);
    const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\"membership_change\""), std::string::npos);
    EXPECT_NE(text.find("generation 1: 1 workers ("), std::string::npos);
    // Step 1 summed over 4 replicas, then steps 2 to 4 over this worker's 2.
    EXPECT_EQ(w.value().item<float>(), 4.0f + 3 * 2.0f);
    EXPECT_EQ(strategy->generation(), 1);
    EXPECT_EQ(strategy->num_replicas_in_sync(), 2);
    EXPECT_EQ(strategy->name(), "MultiWorkerMirroredStrategy(worker 0 of 1 over Gloo: CPU:0, CPU:1)");
    ASSERT_EQ(changes.size(), 2u);
    EXPECT_EQ(changes[1].generation, 1);
    EXPECT_EQ(changes[1].previous_num_workers, 2);
    EXPECT_EQ(changes[1].num_workers, 1);
    ASSERT_EQ(changes[1].left.size(), 1u);
    EXPECT_EQ(changes[1].left[0].rfind("worker 1 on ", 0), 0u) << changes[1].left[0];
  });
}

// An optimizer whose slots are in shards cannot follow the replicas of a new generation: its next
// step says so instead of updating the wrong parts.
TEST(GlooElastic, AnOptimizerWithShardedStateRefusesTheReplicasOfANewGeneration) {
  StoreDirectory store;
  run_workers(2, [&](int rank) {
    MultiWorkerMirroredStrategyOptions options = elastic_options(store.path(), rank, 2);
    options.communication.timeout = 5s;
    MultiWorkerMirroredStrategy strategy(options);
    StrategyScope scope = strategy.scope();
    Variable w(Tensor::zeros(DType::kFloat32, Shape{8}, Device::cpu()), {.name = "w"});
    optimizers::SGD sgd({.learning_rate = 0.5, .momentum = 0.5}, {.shard_state = true});
    sgd.build({w});
    ElasticState state(strategy, Checkpoint({{"w", w}}, sgd.checkpoint_state()));
    const auto step = [&] {
      strategy.run([&] { sgd.apply_gradients({{Tensor::zeros(DType::kFloat32, Shape{8}, Device::cpu()), w}}); });
      ++state.progress.step;
      state.commit();
    };
    if (rank == 1) {
      run_elastic(strategy, state, step);
      return;
    }
    try {
      run_elastic(strategy, state, [&] {
        while (state.progress.step < 3) step();
      });
      ADD_FAILURE() << "no error";
    } catch (const FailedPreconditionError& e) {
      EXPECT_EQ(std::string(e.what()),
                "SGD: the slot SGD/w/momentum is in shards cut for 4 replicas, and its strategy now has 2 (an elastic "
                "job's workers changed); an elastic job's optimizer needs OptimizerOptions::shard_state off");
    }
  });
}

}  // namespace
}  // namespace distribute
