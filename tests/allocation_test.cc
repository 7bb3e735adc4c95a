// Heap allocations of collectives in a training loop. This program replaces the global operator
// new to count calls, so it is its own executable. A replica thread keeps the per-leaf arrays of
// its last collective for the next, so an all_reduce of a gradient list makes the same number of
// allocations per step whatever the number of tensors in it (the returned list and the output
// block's handle), none per tensor. The per-thread reuse itself is tested here too.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "distribute/detail/collective_args.h"
#include "distribute/distribute.h"

namespace {
std::atomic<long> allocations{0};
}  // namespace

void* operator new(std::size_t nbytes) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(nbytes == 0 ? 1 : nbytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace distribute {
namespace {

// Allocations per all_reduce step of a list of `leaves` float tensors, over all replicas: the
// difference between runs of 10 and 30 steps, so that what a run costs once drops out.
long allocations_per_step(MirroredStrategy& strategy, int leaves) {
  auto lists = strategy.run([&] {
    std::vector<Tensor> list;
    for (int t = 0; t < leaves; ++t) list.push_back(Tensor::zeros(DType::kFloat32, Shape{256}));
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
  // Per replica: the returned vector and the output block's Storage.
  EXPECT_EQ(one, 2 * 2);
  EXPECT_EQ(hundred, one);
  EXPECT_EQ(thousand, one);
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

}  // namespace
}  // namespace distribute
