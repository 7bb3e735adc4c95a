// A model-sized optimizer step: SGD with momentum (0.9) applying 2M float32 parameters in 8
// variables, in replica context, against the least any implementation must do for it in the same
// run: the bare batched all_reduce (SUM) of the 8 gradients plus one Eigen pass over the
// parameters that applies the same momentum update to plain tensors. Both are timed as K steps
// inside one run, alternating round by round so machine noise hits both alike; the ratio of the
// medians is what the variables and the optimizer add (checks, slot lookups, the step counter).
// #wrong: after timing, both start from equal state and take one step; the elements where the
// optimizer's variables differ from the bare tensors (or replicas' components from each other).
//
//   ./build/default/bench/optimizer_bench --replicas 4 --iters 10
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "replica_bench.h"

namespace distribute::bench {
namespace {

constexpr int kVariables = 8;
constexpr std::int64_t kElementsPerVariable = 2 * 1024 * 1024 / kVariables;
constexpr double kLearningRate = 0.01;
constexpr double kMomentum = 0.9;
// As the optimizer walks its arrays: a chunk of each stays in L1 across the two statements.
constexpr Eigen::Index kChunk = 2048;

float initial_value(std::int64_t i) { return static_cast<float>(i % 7) * 0.125f; }

Tensor filled(std::int64_t count, float (*value)(std::int64_t), const Device& device) {
  Tensor t = Tensor::empty(DType::kFloat32, Shape{count}, device);
  float* data = t.data<float>();
  for (std::int64_t i = 0; i < count; ++i) data[i] = value(i);
  return t;
}

// One replica's bare step: its summed gradients applied to its own parameters and momenta.
void bare_update(const std::vector<Tensor>& summed, std::vector<Tensor>& params, std::vector<Tensor>& momenta) {
  const auto lr = static_cast<float>(kLearningRate);
  const auto mu = static_cast<float>(kMomentum);
  for (std::size_t k = 0; k < summed.size(); ++k) {
    auto w = params[k].flat<float>();
    auto m = momenta[k].flat<float>();
    const auto g = summed[k].flat<float>();
    for (Eigen::Index i = 0; i < w.size(); i += kChunk) {
      const Eigen::Index n = std::min(kChunk, w.size() - i);
      m.segment(i, n) = mu * m.segment(i, n) - lr * g.segment(i, n);
      w.segment(i, n) += m.segment(i, n);
    }
  }
}

struct Replica {
  std::vector<Tensor> gradients;
  std::vector<std::pair<Tensor, Variable>> grads_and_vars;
  std::vector<Tensor> bare_params;
  std::vector<Tensor> bare_momenta;
};

void bench(int n, const Options& options) {
  MirroredStrategy strategy(cpu_devices(n));
  StrategyScope scope = strategy.scope();
  std::vector<Variable> variables;
  for (int k = 0; k < kVariables; ++k) {
    variables.emplace_back(filled(kElementsPerVariable, initial_value, Device::cpu()),
                           VariableOptions{.name = absl::StrCat("w", k)});
  }
  optimizers::SGD sgd(kLearningRate, kMomentum);
  sgd.build(variables);

  std::vector<Replica> replicas(static_cast<std::size_t>(n));
  strategy.run([&] {
    const ReplicaContext& ctx = *get_replica_context();
    Replica& mine = replicas[static_cast<std::size_t>(ctx.replica_id_in_sync_group())];
    const float scale = 1e-3f * static_cast<float>(ctx.replica_id_in_sync_group() + 1);
    for (const Variable& v : variables) {
      Tensor g = filled(kElementsPerVariable, initial_value, ctx.device());
      g.flat<float>() *= scale;
      mine.gradients.push_back(g);
      mine.grads_and_vars.emplace_back(g, v);
      mine.bare_params.push_back(filled(kElementsPerVariable, initial_value, ctx.device()));
      mine.bare_momenta.push_back(Tensor::zeros(DType::kFloat32, Shape{kElementsPerVariable}, ctx.device()));
    }
  });

  const std::size_t bytes = static_cast<std::size_t>(kVariables * kElementsPerVariable) * sizeof(float);
  const int ops = options.ops > 0 ? options.ops : ops_per_unit(bytes, options);
  auto apply_unit = [&] {
    strategy.run([&] {
      Replica& mine = replicas[static_cast<std::size_t>(get_replica_context()->replica_id_in_sync_group())];
      for (int k = 0; k < ops; ++k) sgd.apply_gradients(mine.grads_and_vars);
    });
  };
  auto bare_unit = [&] {
    strategy.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      Replica& mine = replicas[static_cast<std::size_t>(ctx.replica_id_in_sync_group())];
      for (int k = 0; k < ops; ++k) {
        bare_update(ctx.all_reduce(ReduceOp::kSum, mine.gradients), mine.bare_params, mine.bare_momenta);
      }
    });
  };

  std::printf("# %d replicas, %d variables x %lld float32 (%lld parameters, %s per replica), K = %d steps per run\n",
              n, kVariables, static_cast<long long>(kElementsPerVariable),
              static_cast<long long>(kVariables * kElementsPerVariable), format_bytes(bytes).c_str(), ops);
  std::printf("# %6s %14s %14s %8s\n", "round", "apply(us)", "bare(us)", "ratio");
  Options one = options;
  one.iters = 1;
  std::vector<double> apply;
  std::vector<double> bare;
  const int rounds = std::max(options.iters, 5);
  for (int round = 0; round < rounds; ++round) {
    apply.push_back(time_unit(apply_unit, ops, one).median_s);
    bare.push_back(time_unit(bare_unit, ops, one).median_s);
    std::printf("  %6d %14.1f %14.1f %8.3f\n", round, apply.back() * 1e6, bare.back() * 1e6,
                apply.back() / bare.back());
    std::fflush(stdout);
  }

  std::string wrong = "N/A";
  if (options.check) {
    // Equal state, one step each.
    for (std::size_t k = 0; k < variables.size(); ++k) {
      variables[k].assign(filled(kElementsPerVariable, initial_value, Device::cpu()));
      sgd.get_slot(variables[k], "momentum").assign(Tensor::zeros(DType::kFloat32, Shape{kElementsPerVariable}));
    }
    strategy.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      Replica& mine = replicas[static_cast<std::size_t>(ctx.replica_id_in_sync_group())];
      for (std::size_t k = 0; k < variables.size(); ++k) {
        mine.bare_params[k].flat<float>() = variables[k].value().flat<float>();
        mine.bare_momenta[k].flat<float>().setZero();
      }
      sgd.apply_gradients(mine.grads_and_vars);
      bare_update(ctx.all_reduce(ReduceOp::kSum, mine.gradients), mine.bare_params, mine.bare_momenta);
    });
    long long bad = 0;
    for (int r = 0; r < n; ++r) {
      const Replica& mine = replicas[static_cast<std::size_t>(r)];
      for (std::size_t k = 0; k < variables.size(); ++k) {
        const auto actual = variables[k].component(r).flat<float>();
        bad += (actual != mine.bare_params[k].flat<float>()).count();
        bad += (actual != variables[k].component(0).flat<float>()).count();
      }
    }
    wrong = std::to_string(bad);
  }
  const double apply_s = median(apply);
  const double bare_s = median(bare);
  std::printf("# median: apply_gradients %.1f us, bare all_reduce + Eigen pass %.1f us, ratio %.3f; #wrong %s\n",
              apply_s * 1e6, bare_s * 1e6, apply_s / bare_s, wrong.c_str());
  std::fflush(stdout);
}

// Adam over the same 2M parameters with its state kept whole on every replica and in shards
// (OptimizerOptions::shard_state), alternating round by round: the time of apply_gradients
// in replica context (the gradient collective, the update, and for sharded state the all_gather),
// and the slot bytes each replica holds.
void bench_sharded_adam(int n, const Options& options) {
  MirroredStrategy strategy(cpu_devices(n));
  StrategyScope scope = strategy.scope();
  std::vector<Variable> whole_vars;
  std::vector<Variable> sharded_vars;
  for (int k = 0; k < kVariables; ++k) {
    whole_vars.emplace_back(filled(kElementsPerVariable, initial_value, Device::cpu()),
                            VariableOptions{.name = absl::StrCat("whole", k)});
    sharded_vars.emplace_back(filled(kElementsPerVariable, initial_value, Device::cpu()),
                              VariableOptions{.name = absl::StrCat("sharded", k)});
  }
  optimizers::Adam whole(optimizers::AdamOptions{.learning_rate = 1e-4});
  optimizers::Adam sharded(optimizers::AdamOptions{.learning_rate = 1e-4},
                           optimizers::OptimizerOptions{.shard_state = true});
  whole.build(whole_vars);
  sharded.build(sharded_vars);
  std::vector<std::vector<std::pair<Tensor, Variable>>> whole_pairs(static_cast<std::size_t>(n));
  std::vector<std::vector<std::pair<Tensor, Variable>>> sharded_pairs(static_cast<std::size_t>(n));
  strategy.run([&] {
    const ReplicaContext& ctx = *get_replica_context();
    const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
    for (int k = 0; k < kVariables; ++k) {
      Tensor g = filled(kElementsPerVariable, initial_value, ctx.device());
      g.flat<float>() *= 1e-3f * static_cast<float>(r + 1);
      whole_pairs[r].emplace_back(g, whole_vars[static_cast<std::size_t>(k)]);
      sharded_pairs[r].emplace_back(g, sharded_vars[static_cast<std::size_t>(k)]);
    }
  });
  const std::size_t bytes = static_cast<std::size_t>(kVariables * kElementsPerVariable) * sizeof(float);
  const int ops = options.ops > 0 ? options.ops : ops_per_unit(bytes, options);
  const auto unit = [&](optimizers::Adam& adam, std::vector<std::vector<std::pair<Tensor, Variable>>>& pairs) {
    return [&] {
      strategy.run([&] {
        auto& mine = pairs[static_cast<std::size_t>(get_replica_context()->replica_id_in_sync_group())];
        for (int k = 0; k < ops; ++k) adam.apply_gradients(mine);
      });
    };
  };
  // Adam's two slots per parameter: whole on every replica, or the replica's shard of each.
  std::int64_t shard_elements = 0;
  for (int k = 0; k < kVariables; ++k) shard_elements += shard_of(kElementsPerVariable, n, 0).size;
  std::printf("# Adam, %d replicas, %lld parameters, K = %d steps per run; slot bytes per replica: whole %s, "
              "sharded %s (replica 0's shards)\n",
              n, static_cast<long long>(kVariables * kElementsPerVariable), ops, format_bytes(2 * bytes).c_str(),
              format_bytes(static_cast<std::size_t>(2 * shard_elements) * sizeof(float)).c_str());
  std::printf("# %6s %14s %14s %8s\n", "round", "whole(us)", "sharded(us)", "ratio");
  Options one = options;
  one.iters = 1;
  std::vector<double> whole_s;
  std::vector<double> sharded_s;
  const int rounds = std::max(options.iters, 5);
  for (int round = 0; round < rounds; ++round) {
    whole_s.push_back(time_unit(unit(whole, whole_pairs), ops, one).median_s);
    sharded_s.push_back(time_unit(unit(sharded, sharded_pairs), ops, one).median_s);
    std::printf("  %6d %14.1f %14.1f %8.3f\n", round, whole_s.back() * 1e6, sharded_s.back() * 1e6,
                sharded_s.back() / whole_s.back());
    std::fflush(stdout);
  }
  long long differ = 0;
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < kVariables; ++k) {
      differ += (whole_vars[static_cast<std::size_t>(k)].component(r).flat<float>() !=
                 sharded_vars[static_cast<std::size_t>(k)].component(r).flat<float>())
                    .count();
    }
  }
  std::printf("# median: whole %.1f us, sharded %.1f us, ratio %.3f; elements that differ after equal steps: %lld\n",
              median(whole_s) * 1e6, median(sharded_s) * 1e6, median(sharded_s) / median(whole_s), differ);
  std::fflush(stdout);
}

}  // namespace
}  // namespace distribute::bench

int main(int argc, char** argv) {
  using namespace distribute::bench;
  const Options options = parse_options(
      argc, argv,
      "SGD(momentum 0.9).apply_gradients of 8 float32 variables (2M parameters) vs the bare batched all_reduce of "
      "their gradients plus one Eigen pass over the parameters (sizes are ignored)",
      {4});
  std::printf("# optimizer_bench: %s\n", distribute::build_info().c_str());
  std::printf("# hardware threads: %u; time per step = median over rounds of (run time / K)\n",
              std::thread::hardware_concurrency());
  for (int n : options.replicas) bench(n, options);
  for (int n : options.replicas) bench_sharded_adam(n, options);
  return 0;
}
