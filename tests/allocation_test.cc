// Heap allocations of collectives in a training loop. This program replaces the global operator
// new to count calls (and to fail one on demand), so it is its own executable. A replica thread
// keeps the per-leaf arrays of its last collective for the next, so an all_reduce of a gradient
// list makes the same number of allocations per step whatever the number of tensors in it (the
// returned list and, above 1 KiB, the output block's handle), none per tensor. The per-thread reuse itself is
// tested here too, and what a replica that cannot allocate its result does to the others.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "distribute/replica/internal/collective_args.h"
#include "distribute/distribute.h"
#include "testing/replica_harness.h"

namespace {
std::atomic<long> allocations{0};
// When not 0, this thread's next allocation of exactly this many bytes throws std::bad_alloc.
thread_local std::size_t fail_allocation_of = 0;
}  // namespace

void* operator new(std::size_t nbytes) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (fail_allocation_of != 0 && nbytes == fail_allocation_of) {
    fail_allocation_of = 0;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(nbytes == 0 ? 1 : nbytes)) return p;
  throw std::bad_alloc();
}
// Not inlined: GCC would then see free() called on what operator new returned, and warn.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace distribute {
namespace {

// Allocations per all_reduce step of a list of `leaves` float tensors of `elements` each, over
// all replicas: the difference between runs of 10 and 30 steps, so that what a run costs once
// drops out.
long allocations_per_step(MirroredStrategy& strategy, int leaves, std::int64_t elements = 512) {
  auto lists = strategy.run([&] {
    std::vector<Tensor> list;
    for (int t = 0; t < leaves; ++t) list.push_back(Tensor::zeros(DType::kFloat32, Shape{elements}));
    return list;
  });
  const auto count_run = [&](int steps) {
    const long before = allocations.load();
    strategy.run(
        [&](const std::vector<Tensor>& grads) {
          ReplicaContext& ctx = *get_replica_context();
          for (int s = 0; s < steps; ++s) ctx.all_reduce(ReduceOp::kSum, grads);
        },
        lists);
    return allocations.load() - before;
  };
  count_run(10);  // each thread's arrays and the pools' blocks are made here
  const long ten = count_run(10);
  const long thirty = count_run(30);
  return (thirty - ten) / 20;
}

TEST(Allocations, AllReduceOfAGradientListAllocatesTheSameWhateverItsLength) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  const long one = allocations_per_step(strategy, 1);
  const long hundred = allocations_per_step(strategy, 100);
  const long thousand = allocations_per_step(strategy, 1000);
  // Per replica: the returned vector and the output block's Storage (2 KiB and more: above what a
  // thread keeps of the Storages it dropped).
  EXPECT_EQ(one, 2 * 2);
  EXPECT_EQ(hundred, one);
  EXPECT_EQ(thousand, one);
}

// A loss or a metric: the replica thread takes back the output Storage of the step before, so
// only the returned vector is allocated.
TEST(Allocations, AllReduceOfASmallTensorReusesTheStorageOfTheStepBefore) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  EXPECT_EQ(allocations_per_step(strategy, 1, 1), 2 * 1);
  EXPECT_EQ(allocations_per_step(strategy, 1, 256), 2 * 1) << "1 KiB: the largest block a thread keeps";
}

// A collective started while another is under way on the same thread (none does today, but
// nothing forbids it) gets arrays of its own; the thread then keeps one set for the next.
TEST(Allocations, NestedCollectivesOnOneThreadGetTheirOwnLeafArrays) {
  const detail::LeafArrays* inner_arrays = nullptr;
  {
    detail::LeafArraysLease outer;
    (*outer).inputs.resize(3);
    {
      detail::LeafArraysLease inner;
      inner_arrays = &*inner;
      EXPECT_NE(inner_arrays, &*outer);
      EXPECT_TRUE((*inner).inputs.empty());
      (*inner).inputs.resize(5);
    }
    EXPECT_EQ((*outer).inputs.size(), 3u);
  }
  // The inner collective's arrays became the thread's spare first; the outer's were freed.
  detail::LeafArraysLease next;
  EXPECT_EQ(&*next, inner_arrays);
  EXPECT_EQ((*next).inputs.size(), 5u);
}

// An all_reduce makes its result while the replica waits for the others at the rendezvous. When
// that fails (here: no memory for the returned list on replica 1), the replica still takes its
// part in the data phase, so the others finish theirs, and only then throws: the run fails with
// the replica's own error instead of hanging, and the strategy works for the next run.
TEST(Allocations, AReplicaThatCannotAllocateItsResultFailsTheRunWithoutHanging) {
  using namespace std::chrono_literals;
  testing::Watchdog watchdog(60s, "failed result allocation");
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  constexpr int kLeaves = 100;
  auto lists = strategy.run([&] {
    std::vector<Tensor> list;
    for (int t = 0; t < kLeaves; ++t) list.push_back(Tensor::zeros(DType::kFloat32, Shape{256}));
    return list;
  });
  std::vector<float> replica0_sum;
  for (int trial = 0; trial < 20; ++trial) {
    replica0_sum.clear();
    EXPECT_THROW(strategy.run(
                     [&](const std::vector<Tensor>& grads) {
                       ReplicaContext& ctx = *get_replica_context();
                       if (ctx.replica_id_in_sync_group() == 1) fail_allocation_of = kLeaves * sizeof(Tensor);
                       std::vector<Tensor> sums = ctx.all_reduce(ReduceOp::kSum, grads);
                       replica0_sum = sums[kLeaves - 1].to_vector<float>();
                     },
                     lists),
                 std::bad_alloc);
    fail_allocation_of = 0;
    EXPECT_EQ(replica0_sum, std::vector<float>(256, 0.0f));
  }
  PerReplica<float> ones = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  EXPECT_EQ(ones.values(), (std::vector<float>{2.0f, 2.0f}));
}

}  // namespace
}  // namespace distribute
