// Optimizers with OptimizerOptions::shard_state: bit for bit the unsharded optimizer's results
// (SGD plain, momentum, Nesterov; Adam) for 1-4 replicas (uneven shards included), float32 and
// float64, in replica context, with skipped aggregation, in cross-replica context and through
// GradientBuckets (which equal apply_gradients bit for bit, sharded or not); each
// replica's slots only its shard; and what sharded state does not offer yet (slots as variables).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distribute/distribute.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using optimizers::Adam;
using optimizers::AdamOptions;
using optimizers::Optimizer;
using optimizers::OptimizerOptions;
using optimizers::SGD;
using optimizers::SGDOptions;
using testing::cpu_devices;
using testing::expect_error;

// Which optimizer, made under the current scope.
using Factory = std::function<std::unique_ptr<Optimizer>(bool shard_state)>;

struct Kind {
  std::string name;
  Factory make;
};

std::vector<Kind> kinds() {
  return {
      {"SGD", [](bool s) { return std::make_unique<SGD>(SGDOptions{.learning_rate = 0.1}, OptimizerOptions{s}); }},
      {"Momentum",
       [](bool s) {
         return std::make_unique<SGD>(SGDOptions{.learning_rate = 0.05, .momentum = 0.9}, OptimizerOptions{s});
       }},
      {"Nesterov",
       [](bool s) {
         return std::make_unique<SGD>(SGDOptions{.learning_rate = 0.05, .momentum = 0.8, .nesterov = true},
                                      OptimizerOptions{s});
       }},
      {"Adam", [](bool s) { return std::make_unique<Adam>(AdamOptions{.learning_rate = 0.01}, OptimizerOptions{s}); }},
  };
}

// Random values, the same for a given seed in every process.
std::vector<double> random_values(std::uint32_t seed, std::int64_t n) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = dist(gen);
  return v;
}

Tensor tensor_of(DType dtype, const std::vector<double>& v, const Shape& shape) {
  if (dtype == DType::kFloat64) return Tensor::from_vector<double>(v, shape);
  return Tensor::from_vector<float>(std::vector<float>(v.begin(), v.end()), shape);
}

// The bytes of a tensor, for comparing bit for bit.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  std::vector<unsigned char> out(host.nbytes());
  if (!out.empty()) std::memcpy(out.data(), host.raw_data(), out.size());
  return out;
}

class ShardedState : public ::testing::TestWithParam<std::tuple<int, DType>> {
 protected:
  int n() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }

  // Shapes with shards of different sizes for every replica count here, and one shorter than
  // some replica counts. Tests of small lists replace them: the shared-memory backend moves a
  // few bytes by other paths (staged inputs, one cache line per replica).
  std::vector<Shape> shapes_{Shape{7, 3}, Shape{5}, Shape{2}, Shape{64, 33}};

  // Trains variables of shapes_ for `steps` steps with `kind` (sharded or not); `mode` 0: replica
  // context, 1: replica context with aggregation skipped (each replica passes the sums), 2:
  // cross-replica context, 3: replica context through GradientBuckets. Returns every variable's
  // every component.
  std::vector<std::vector<Tensor>> train(const Kind& kind, bool shard_state, int mode, int steps) {
    MirroredStrategy strategy(cpu_devices(n()));
    StrategyScope scope = strategy.scope();
    std::vector<Variable> variables;
    for (std::size_t k = 0; k < shapes_.size(); ++k) {
      variables.emplace_back(tensor_of(dtype(), random_values(100 + static_cast<std::uint32_t>(k),
                                                              shapes_[k].num_elements()),
                                       shapes_[k]),
                             VariableOptions{.name = absl::StrCat("w", k)});
    }
    std::unique_ptr<Optimizer> optimizer = kind.make(shard_state);
    const int replicas = n();
    for (int step = 0; step < steps; ++step) {
      // Replica r's gradient of variable k at `step`; the sums for modes 1 and 2.
      const auto gradient = [&](int r, std::size_t k) {
        return tensor_of(dtype(),
                         random_values(static_cast<std::uint32_t>(1000 * step + 10 * r + static_cast<int>(k)),
                                       shapes_[k].num_elements()),
                         shapes_[k]);
      };
      const auto summed = [&](std::size_t k) {
        std::vector<double> sum(static_cast<std::size_t>(shapes_[k].num_elements()), 0.0);
        for (int r = 0; r < replicas; ++r) {
          const std::vector<double> g = random_values(static_cast<std::uint32_t>(1000 * step + 10 * r + static_cast<int>(k)),
                                                      shapes_[k].num_elements());
          for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
        }
        return tensor_of(dtype(), sum, shapes_[k]);
      };
      if (mode == 3) {
        strategy.run([&] {
          const int r = get_replica_context()->replica_id_in_sync_group();
          // Buckets of a few hundred bytes, filled as a backward pass would: last variable first.
          optimizers::GradientBuckets buckets = optimizer->gradient_buckets({.bucket_bytes = 300});
          for (std::size_t k = variables.size(); k-- > 0;) buckets.add(variables[k], gradient(r, k));
          optimizer->apply_gradients(buckets);
        });
        continue;
      }
      if (mode == 2) {
        std::vector<std::pair<Tensor, Variable>> pairs;
        for (std::size_t k = 0; k < variables.size(); ++k) pairs.emplace_back(summed(k), variables[k]);
        optimizer->apply_gradients(pairs);
        continue;
      }
      strategy.run([&] {
        const int r = get_replica_context()->replica_id_in_sync_group();
        std::vector<std::pair<Tensor, Variable>> pairs;
        for (std::size_t k = 0; k < variables.size(); ++k) {
          pairs.emplace_back(mode == 1 ? summed(k) : gradient(r, k), variables[k]);
        }
        optimizer->apply_gradients(pairs, optimizers::ApplyOptions{.skip_gradients_aggregation = mode == 1});
      });
    }
    std::vector<std::vector<Tensor>> out;
    for (const Variable& v : variables) {
      std::vector<Tensor>& components = out.emplace_back();
      for (int c = 0; c < v.num_components(); ++c) components.push_back(v.component(c).clone());
    }
    return out;
  }

  void expect_bit_identical(int mode) {
    for (const Kind& kind : kinds()) {
      const auto plain = train(kind, false, mode, 3);
      const auto sharded = train(kind, true, mode, 3);
      for (std::size_t k = 0; k < plain.size(); ++k) {
        const Tensor initial = tensor_of(dtype(), random_values(100 + static_cast<std::uint32_t>(k),
                                                                shapes_[k].num_elements()),
                                         shapes_[k]);
        EXPECT_NE(bytes_of(plain[k][0]), bytes_of(initial)) << kind.name << ": variable " << k << " did not train";
        for (std::size_t c = 0; c < plain[k].size(); ++c) {
          EXPECT_EQ(bytes_of(sharded[k][c]), bytes_of(plain[k][c]))
              << kind.name << ": variable " << k << ", component " << c << ", mode " << mode;
        }
      }
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Replicas, ShardedState,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DType::kFloat32, DType::kFloat64)),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "replicas" +
                                  (std::get<1>(p.param) == DType::kFloat32 ? "Float32" : "Float64");
                         });

TEST_P(ShardedState, ReplicaStepsAreBitIdenticalToTheUnshardedOptimizers) { expect_bit_identical(0); }

TEST_P(ShardedState, StepsWithSkippedAggregationAreBitIdentical) { expect_bit_identical(1); }

TEST_P(ShardedState, CrossReplicaStepsAreBitIdentical) { expect_bit_identical(2); }

TEST_P(ShardedState, StepsThroughGradientBucketsAreBitIdenticalToApplyGradients) {
  for (const Kind& kind : kinds()) {
    const auto plain = train(kind, false, 0, 3);
    for (const bool shard_state : {false, true}) {
      const auto bucketed = train(kind, shard_state, 3, 3);
      for (std::size_t k = 0; k < plain.size(); ++k) {
        for (std::size_t c = 0; c < plain[k].size(); ++c) {
          EXPECT_EQ(bytes_of(bucketed[k][c]), bytes_of(plain[k][c]))
              << kind.name << ": variable " << k << ", component " << c << ", shard_state " << shard_state;
        }
      }
    }
  }
}

TEST_P(ShardedState, StepsOfAFewHundredBytesAreBitIdentical) {
  shapes_ = {Shape{7, 3}, Shape{5}, Shape{2}};
  expect_bit_identical(0);
}

TEST_P(ShardedState, StepsOfAFewBytesAreBitIdentical) {
  shapes_ = {Shape{5}, Shape{2}};
  expect_bit_identical(0);
}

TEST(ShardedStateRules, SlotsAreNotVariables) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(Tensor::from_vector<float>({1, 2, 3}), VariableOptions{.name = "w"});
  Adam adam(AdamOptions{}, OptimizerOptions{.shard_state = true});
  EXPECT_TRUE(adam.shards_state());
  adam.build({w});
  expect_error<UnimplementedError>([&] { adam.variables(); },
                                   {"Adam.variables: the slots are kept in shards across the replicas "
                                    "(OptimizerOptions::shard_state), not as variables; checkpoint them through "
                                    "checkpoint_state()"});
  expect_error<UnimplementedError>([&] { adam.get_slot(w, "m"); }, {"Adam.get_slot: the slots are kept in shards"});
  EXPECT_FALSE(Adam().shards_state());
}

// Trains `w` (7 elements) on `replicas` replicas for `steps` steps with a fresh Adam (sharded or
// not), first restoring `from` if it is not empty; saves to `to`. Returns w and the whole slots
// m, v as read through the checkpoint state.
std::vector<std::vector<float>> train_and_save(int replicas, bool shard_state, int steps, const std::string& from,
                                               const std::string& to) {
  MirroredStrategy strategy(cpu_devices(replicas));
  StrategyScope scope = strategy.scope();
  Variable w(Tensor::from_vector<float>({0.5f, -1, 2, 0.25f, 3, -0.75f, 1}), VariableOptions{.name = "w"});
  Adam adam(AdamOptions{.learning_rate = 0.1}, OptimizerOptions{.shard_state = shard_state});
  adam.build({w});
  Checkpoint checkpoint({{"w", w}}, adam.checkpoint_state());
  if (!from.empty()) checkpoint.restore(from);
  for (int step = 0; step < steps; ++step) {
    // The same summed gradient whatever the replica count: replica 0 carries it all.
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      std::vector<float> g(7, 0.0f);
      if (r == 0) {
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(static_cast<float>(i + 10 * step));
      }
      adam.apply_gradients({{Tensor::from_vector<float>(g), w}});
    });
  }
  checkpoint.save(to);
  std::vector<std::vector<float>> out{w.value().to_vector<float>()};
  for (const auto& [name, state] : adam.checkpoint_state()) {
    if (name != "Adam/iterations") out.push_back(state.read().to_vector<float>());
  }
  return out;
}

TEST(ShardedStateRules, CheckpointsMoveBetweenShardedAndWholeStateAndReplicaCounts) {
  const std::string dir = ::testing::TempDir();
  // Reference: whole state on 2 replicas, 2 steps then 2 more after a save and restore.
  train_and_save(2, false, 2, "", dir + "/whole_a.safetensors");
  const auto whole = train_and_save(2, false, 2, dir + "/whole_a.safetensors", dir + "/whole_b.safetensors");
  // Sharded on 2 replicas, then restored into whole state on 3, and the other way round.
  train_and_save(2, true, 2, "", dir + "/sharded_a.safetensors");
  const auto into_whole = train_and_save(3, false, 2, dir + "/sharded_a.safetensors", dir + "/into_whole.safetensors");
  const auto into_sharded = train_and_save(3, true, 2, dir + "/whole_a.safetensors", dir + "/into_sharded.safetensors");
  ASSERT_EQ(whole.size(), 3u);  // w, m, v
  for (std::size_t k = 0; k < whole.size(); ++k) {
    EXPECT_EQ(into_whole[k], whole[k]) << "tensor " << k;
    EXPECT_EQ(into_sharded[k], whole[k]) << "tensor " << k;
  }
  EXPECT_NE(whole[1], std::vector<float>(7, 0.0f));
}

TEST(ShardedStateRules, AVariableListThatDiffersBetweenReplicasIsStillNamed) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable a(Tensor::from_vector<float>({1, 2, 3}), VariableOptions{.name = "a"});
  Variable b(Tensor::from_vector<float>({1, 2, 3}), VariableOptions{.name = "b"});
  SGD sgd(SGDOptions{.learning_rate = 0.1, .momentum = 0.5}, OptimizerOptions{.shard_state = true});
  sgd.build({a, b});
  expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([&] {
          const bool first = get_replica_context()->replica_id_in_sync_group() == 0;
          sgd.apply_gradients({{Tensor::from_vector<float>({1, 1, 1}), first ? a : b}});
        });
      },
      {"reduce_scatter #1", "SGD.apply_gradients of 'a'", "SGD.apply_gradients of 'b'"});
}

TEST(GradientBucketsRules, ReplicasThatAddOtherVariablesAreNamed) {
  for (const bool shard_state : {false, true}) {
    MirroredStrategy strategy(cpu_devices(2));
    StrategyScope scope = strategy.scope();
    Variable a(Tensor::from_vector<float>({1, 2, 3}), VariableOptions{.name = "a"});
    Variable b(Tensor::from_vector<float>({1, 2, 3}), VariableOptions{.name = "b"});
    SGD sgd(SGDOptions{.learning_rate = 0.1}, OptimizerOptions{.shard_state = shard_state});
    expect_error<InvalidArgumentError>(
        [&] {
          strategy.run([&] {
            const bool first = get_replica_context()->replica_id_in_sync_group() == 0;
            optimizers::GradientBuckets buckets = sgd.gradient_buckets();
            buckets.add(first ? a : b, Tensor::from_vector<float>({1, 1, 1}));
            sgd.apply_gradients(buckets);
          });
        },
        {shard_state ? "reduce_scatter #1" : "all_reduce #1", "SGD.apply_gradients of 'a'",
         "SGD.apply_gradients of 'b'"});
  }
}

TEST(GradientBucketsRules, MisuseIsNamed) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(Tensor::from_vector<float>({1, 2, 3}), VariableOptions{.name = "w"});
  SGD sgd(0.1);
  const Tensor grad = Tensor::from_vector<float>({1, 1, 1});
  expect_error<FailedPreconditionError>([&] { sgd.gradient_buckets(); },
                                        {"SGD.gradient_buckets: called outside a replica's fn"});
  const auto in_run = [&](auto&& body) { strategy.run([&] { body(); }); };
  expect_error<InvalidArgumentError>([&] { in_run([&] { sgd.gradient_buckets({.bucket_bytes = 0}); }); },
                                     {"SGD.gradient_buckets: bucket_bytes is 0; it must be at least 1"});
  expect_error<InvalidArgumentError>(
      [&] {
        in_run([&] {
          auto buckets = sgd.gradient_buckets();
          buckets.add(w, grad);
          buckets.add(w, grad);
        });
      },
      {"SGD.GradientBuckets::add: variable 'w' was added twice in this step"});
  expect_error<InvalidArgumentError>(
      [&] { in_run([&] { sgd.gradient_buckets().add(w, Tensor::from_vector<float>({1, 1})); }); },
      {"SGD.GradientBuckets::add: the gradient of variable 'w' has shape (2,) but the variable has shape (3,)"});
  expect_error<InvalidArgumentError>(
      [&] {
        in_run([&] {
          auto buckets = sgd.gradient_buckets();
          sgd.apply_gradients(buckets);
        });
      },
      {"SGD.apply_gradients: no gradient was added to the buckets"});
  expect_error<FailedPreconditionError>(
      [&] {
        in_run([&] {
          auto buckets = sgd.gradient_buckets();
          buckets.add(w, grad);
          sgd.apply_gradients(buckets);
          buckets.add(w, grad);
        });
      },
      {"GradientBuckets::add: the buckets were applied already; make new ones with gradient_buckets()"});
  // After every misuse the strategy still steps.
  auto after = strategy.run([&] {
    auto buckets = sgd.gradient_buckets();
    buckets.add(w, grad);
    sgd.apply_gradients(buckets);
    return w.value().to_vector<float>();
  });
  EXPECT_EQ(after[1], after[0]);
}

}  // namespace
}  // namespace distribute
