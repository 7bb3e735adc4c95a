// Async collectives across workers (multi_worker_test.cc): the calls queued behind a voted call are
// agreed on in its vote, one that differs between workers is named by a vote of its own, and a
// replica that fails once such calls are agreed still lets every worker take them, then fails
// every worker promptly with its error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "multi_worker_test.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::MultiWorker;

// 4 MiB: its step across the workers lasts long enough for the calls issued after it to be
// queued on every replica's lane, on every worker, before the next vote (milliseconds, where
// issuing takes microseconds), and is light enough for the tests that ctest runs beside it.
Tensor long_call_value() {
  constexpr std::int64_t kCount = std::int64_t{1} << 20;
  return Tensor::from_vector<float>(std::vector<float>(static_cast<std::size_t>(kCount), 1.0f), Shape{kCount});
}

Tensor scalar(float v) { return Tensor::from_vector<float>({v}, Shape{1}); }

TEST_F(MultiWorker, AsyncCallsQueuedBehindAVotedCallAreAgreedOnInItsVote) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  s.extended().reset_collective_stats();
  const PerReplica<std::vector<float>> results = s.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const auto id = static_cast<float>(ctx.replica_id_in_sync_group());
    CollectiveHandle<Tensor> first = ctx.all_reduce_async(ReduceOp::kSum, long_call_value());
    std::vector<CollectiveHandle<Tensor>> queued;
    for (int k = 0; k < 4; ++k) queued.push_back(ctx.all_reduce_async(ReduceOp::kSum, scalar(id + 10.0f * k)));
    std::vector<float> out{first.wait().to_vector<float>().back()};
    for (CollectiveHandle<Tensor>& h : queued) out.push_back(h.wait().to_vector<float>()[0]);
    return out;
  });
  const auto n_all = static_cast<float>(n());
  const float ids = n_all * (n_all - 1) / 2;
  for (int r = 0; r < local(); ++r) {
    EXPECT_EQ(results[r], (std::vector<float>{n_all, ids, ids + 10 * n_all, ids + 20 * n_all, ids + 30 * n_all})) << "replica " << r;
  }
  // Without agreeing ahead: six votes (five calls and the run's end). The four small calls are
  // queued while the first one's data crosses, so they take at most one vote of their own (none
  // when the first call's vote already found them queued everywhere).
  const std::int64_t votes = s.extended().collective_stats().cross_worker_votes;
  EXPECT_GE(votes, 2);
  EXPECT_LE(votes, 3);
}

// Worker 1's third call passes float32[3], the others' float32[2]. The calls queued alike before
// it may be agreed on ahead; it is not, and its own vote names the workers, on every worker.
TEST_F(MultiWorker, AQueuedCallThatDiffersOnOneWorkerIsNamedByItsOwnVote) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int w = worker();
  const auto n_all = static_cast<float>(n());
  try {
    s.run([w, n_all] {
      ReplicaContext& ctx = *get_replica_context();
      CollectiveHandle<Tensor> first = ctx.all_reduce_async(ReduceOp::kSum, long_call_value());
      CollectiveHandle<Tensor> second = ctx.all_reduce_async(ReduceOp::kSum, scalar(1.0f));
      CollectiveHandle<Tensor> third =
          ctx.all_reduce_async(ReduceOp::kSum, Tensor::zeros(DType::kFloat32, Shape{w == 1 ? 3 : 2}));
      CollectiveHandle<Tensor> fourth = ctx.all_reduce_async(ReduceOp::kSum, scalar(2.0f));
      EXPECT_EQ(first.wait().to_vector<float>().back(), n_all);
      EXPECT_EQ(second.wait().to_vector<float>()[0], n_all);
      third.wait();
    });
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("all_reduce #3: " + workers_text(1, 1)));
    EXPECT_THAT(e.what(), HasSubstr(") passed float32[3], worker"));
    EXPECT_THAT(e.what(), HasSubstr(") passed float32[2]"));
  }
  expect_still_usable();
}

TEST_F(MultiWorker, AReplicaRaisingAfterItsQueuedCallsWereAgreedFailsEveryWorkerPromptly) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  const int raiser = local() - 1;  // worker 0's last replica
  const bool here = worker() == 0;
  // How many calls the first vote finds queued depends on the threads' timing; the later votes find
  // every call queued. Several rounds make it near certain that some raise comes while the third
  // call's step, agreed ahead, is under way and the fourth is agreed and not begun.
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    try {
      s.run([&] {
        ReplicaContext& ctx = *get_replica_context();
        const int local_id = ctx.replica_id_in_sync_group() - worker() * local();
        CollectiveHandle<Tensor> first = ctx.all_reduce_async(ReduceOp::kSum, long_call_value());
        CollectiveHandle<Tensor> second = ctx.all_reduce_async(ReduceOp::kSum, scalar(1.0f));
        CollectiveHandle<Tensor> third = ctx.all_reduce_async(ReduceOp::kSum, long_call_value());
        CollectiveHandle<Tensor> fourth = ctx.all_reduce_async(ReduceOp::kSum, scalar(2.0f));
        second.wait();
        if (here && local_id == raiser) throw std::runtime_error("injected after the vote");
        // The handles of the agreed calls complete, or are released with the failure.
        for (CollectiveHandle<Tensor>* h : {&third, &fourth}) {
          try {
            h->wait();
          } catch (const AbortedError&) {
          }
        }
        ctx.all_reduce(ReduceOp::kSum, 1.0f);
      });
      ADD_FAILURE() << "no error";
    } catch (const AbortedError& e) {
      EXPECT_FALSE(here) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("raised: injected after the vote"));
    } catch (const std::runtime_error& e) {
      EXPECT_TRUE(here) << e.what();
      EXPECT_STREQ(e.what(), "injected after the vote");
    }
    // Promptly: no worker waited for a step another one skipped (the timeout is 20 s).
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "round " << round;
  }
  PerReplica<float> sum = s.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, 1.0f); });
  EXPECT_EQ(sum[0], static_cast<float>(n()));
}

}  // namespace
}  // namespace distribute
