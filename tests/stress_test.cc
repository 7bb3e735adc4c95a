// Stress: thousands of runs on 4 replicas mixing all_reduce, all_gather and merge_call in varying
// orders and sizes, every result checked; and a run loop on 8 replicas, more than the machine's
// cores, where replicas must wait without spinning each other off the cores. Iteration counts
// shrink under sanitizers, which slow every step down.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/replica_harness.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using testing::Watchdog;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kMixedRuns = 300;
constexpr int kOversubscribedRuns = 60;
#else
constexpr int kMixedRuns = 3000;
constexpr int kOversubscribedRuns = 500;
#endif

constexpr std::chrono::milliseconds kHangLimit{50000};

// Replica r's element j in run `run` (small integers, so float sums are exact).
float element(int r, std::int64_t j, int run) { return static_cast<float>(((r + 1) * (j + run)) % 13); }

// Sizes vary from run to run; now and then a large one that spans many cache lines and slices.
std::int64_t reduce_size(int run) { return run % 97 == 0 ? 20011 : (run * 7919) % 300; }

// One step of the mixed workload: returns how many checks failed on this replica. The order of
// the three collectives rotates with the run number.
int mixed_step(int run, std::atomic<int>& merges) {
  ReplicaContext& ctx = *get_replica_context();
  const int r = ctx.replica_id_in_sync_group();
  const int n = ctx.num_replicas_in_sync();
  int failures = 0;

  auto do_all_reduce = [&] {
    const std::int64_t size = reduce_size(run);
    std::vector<float> values(static_cast<std::size_t>(size));
    for (std::int64_t j = 0; j < size; ++j) values[static_cast<std::size_t>(j)] = element(r, j, run);
    const ReduceOp op = run % 2 == 0 ? ReduceOp::kSum : ReduceOp::kMean;
    Tensor out = ctx.all_reduce(op, Tensor::from_vector<float>(std::move(values)));
    if (out.num_elements() != size) {
      ++failures;
      return;
    }
    const float* data = out.data<float>();
    for (std::int64_t j = 0; j < size; ++j) {
      float sum = 0;
      for (int k = 0; k < n; ++k) sum += element(k, j, run);
      const float expected = op == ReduceOp::kSum ? sum : sum / static_cast<float>(n);
      if (data[j] != expected) ++failures;
    }
  };

  auto do_all_gather = [&] {
    const std::int64_t cols = run % 3 + 1;
    const auto rows_of = [&](int k) { return static_cast<std::int64_t>((run + k) % 4); };
    std::vector<std::int32_t> mine(static_cast<std::size_t>(rows_of(r) * cols));
    for (std::size_t j = 0; j < mine.size(); ++j) mine[j] = static_cast<std::int32_t>(r * 1000 + run % 1000 + static_cast<int>(j));
    Tensor out = ctx.all_gather(Tensor::from_vector<std::int32_t>(std::move(mine), Shape{rows_of(r), cols}), 0);
    std::vector<std::int32_t> expected;
    std::int64_t rows = 0;
    for (int k = 0; k < n; ++k) {
      for (std::int64_t j = 0; j < rows_of(k) * cols; ++j) {
        expected.push_back(static_cast<std::int32_t>(k * 1000 + run % 1000 + static_cast<int>(j)));
      }
      rows += rows_of(k);
    }
    if (out.shape() != Shape({rows, cols}) || out.to_vector<std::int32_t>() != expected) ++failures;
  };

  auto do_merge_call = [&] {
    const std::pair<std::int64_t, double> got = ctx.merge_call(
        [&merges](Strategy&, const PerReplica<std::int64_t>& v) {
          merges.fetch_add(1, std::memory_order_relaxed);
          std::int64_t sum = 0;
          for (std::int64_t x : v.values()) sum += x;
          std::vector<std::int64_t> own;
          for (std::int64_t x : v.values()) own.push_back(sum + x);
          return std::make_pair(PerReplica<std::int64_t>(own), 0.5 * static_cast<double>(sum));
        },
        std::int64_t{run} * 10 + r);
    const std::int64_t sum = std::int64_t{run} * 10 * n + n * (n - 1) / 2;
    if (got.first != sum + std::int64_t{run} * 10 + r || got.second != 0.5 * static_cast<double>(sum)) ++failures;
  };

  switch (run % 3) {
    case 0:
      do_all_reduce();
      do_all_gather();
      do_merge_call();
      break;
    case 1:
      do_merge_call();
      do_all_reduce();
      do_all_gather();
      break;
    default:
      do_all_gather();
      do_merge_call();
      do_all_reduce();
      do_merge_call();
      break;
  }
  // Every few runs, a nest of scalars and tensors in one collective.
  if (run % 5 == 0) {
    std::pair<double, std::vector<Tensor>> value{
        static_cast<double>(r), {Tensor::from_vector<std::int64_t>({r, run}), Tensor::scalar<double>(2.0 * r)}};
    auto out = ctx.all_reduce(ReduceOp::kSum, value);
    const double ids = n * (n - 1) / 2.0;
    const std::vector<std::int64_t> expected{static_cast<std::int64_t>(ids), std::int64_t{run} * n};
    if (out.first != ids || out.second[0].to_vector<std::int64_t>() != expected || out.second[1].item<double>() != 2 * ids) {
      ++failures;
    }
  }
  return failures;
}

int merges_per_run(int run) { return run % 3 == 2 ? 2 : 1; }

// Runs `runs` mixed steps on `replicas` replicas and checks every result and the merge count.
void run_mixed_steps(int replicas, int runs, const char* what) {
  Watchdog watchdog(kHangLimit, what);
  MirroredStrategy strategy(cpu_devices(replicas));
  std::atomic<int> merges{0};
  int expected_merges = 0;
  std::int64_t failures = 0;
  for (int run = 0; run < runs; ++run) {
    PerReplica<int> result = strategy.run([&] { return mixed_step(run, merges); });
    for (int f : result.values()) failures += f;
    expected_merges += merges_per_run(run);
    if (failures != 0) {
      ADD_FAILURE() << failures << " wrong results by run " << run;
      break;
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(merges.load(), expected_merges);
}

TEST(Stress, MixedCollectivesOnFourReplicas) {
  run_mixed_steps(4, kMixedRuns, "Stress.MixedCollectivesOnFourReplicas");
}

TEST(Stress, RunLoopOnMoreReplicasThanCores) {
  run_mixed_steps(8, kOversubscribedRuns, "Stress.RunLoopOnMoreReplicasThanCores");
}

// Empty runs back to back: the start/finish handshake of the persistent threads alone.
TEST(Stress, ManyEmptyRuns) {
  Watchdog watchdog(kHangLimit, "Stress.ManyEmptyRuns");
  MirroredStrategy strategy(cpu_devices(4));
  std::atomic<std::int64_t> calls{0};
  for (int run = 0; run < kMixedRuns; ++run) strategy.run([&] { calls.fetch_add(1, std::memory_order_relaxed); });
  EXPECT_EQ(calls.load(), 4 * std::int64_t{kMixedRuns});
}

// Failing runs interleaved with good ones: each failure must leave the strategy fully usable.
TEST(Stress, FailuresInterleavedWithGoodRuns) {
  Watchdog watchdog(kHangLimit, "Stress.FailuresInterleavedWithGoodRuns");
  MirroredStrategy strategy(cpu_devices(4));
  std::atomic<int> merges{0};
  std::int64_t failures = 0;
  for (int run = 0; run < kMixedRuns / 10; ++run) {
    const int failing = run % 4;
    try {
      strategy.run([&] {
        ReplicaContext& ctx = *get_replica_context();
        // The failing replica leaves at a different point of the step each time.
        if (ctx.replica_id_in_sync_group() == failing && run % 2 == 0) throw std::out_of_range("early");
        ctx.all_reduce(ReduceOp::kSum, Tensor::from_vector<float>({1, 2, 3}));
        if (ctx.replica_id_in_sync_group() == failing) throw std::out_of_range("late");
        ctx.merge_call([](Strategy&) {});
      });
      ADD_FAILURE() << "run " << run << " did not throw";
    } catch (const std::out_of_range& e) {
      EXPECT_STREQ(e.what(), run % 2 == 0 ? "early" : "late");
    }
    PerReplica<int> result = strategy.run([&] { return mixed_step(run, merges); });
    for (int f : result.values()) failures += f;
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace distribute
