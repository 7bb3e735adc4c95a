// ElasticMembership (gloo/membership.h), the elastic job's generations agreed through the
// rendezvous store, with workers as threads over a file store of the test's own: every worker gets
// the same member list whoever closes the generation, a generation whose first worker died
// before closing it is closed by the others, and a survivor that gives up later than the others
// is waited for when they had seen it alive.
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/gloo/store.h"
#include "distribute/errors.h"
#include "gloo/membership.h"
#include "testing/forked_workers.h"

namespace distribute::detail {
namespace {

using namespace std::chrono_literals;
using cluster::gloo_backend::FileStore;
using cluster::gloo_backend::store_claim;

ElasticMembershipOptions options_of(int rank, int workers) {
  ElasticMembershipOptions options;
  options.prefix = "job/elastic";
  options.initial_rank = rank;
  options.initial_workers = workers;
  options.settle_time = 200ms;
  options.survivor_wait = 1500ms;
  options.timeout = 10s;
  return options;
}

// Runs fn(w) for each w in `workers` on a thread of its own; an error fails the test.
template <class Fn>
void on_threads(const std::vector<int>& workers, Fn&& fn) {
  std::vector<std::thread> threads;
  for (int w : workers) {
    threads.emplace_back([&fn, w] {
      try {
        fn(w);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "worker " << w << ": " << e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

std::vector<std::string> tokens(const ElasticGeneration& generation) {
  std::vector<std::string> out;
  for (const ElasticMember& m : generation.members) out.push_back(m.token);
  return out;
}

// A job of `size` workers over a file store of its own, their first generation formed.
struct Job {
  explicit Job(int size) : store(std::make_shared<FileStore>(directory.path())), first(static_cast<std::size_t>(size)) {
    std::vector<int> all;
    for (int r = 0; r < size; ++r) {
      workers.push_back(std::make_unique<ElasticMembership>(store, options_of(r, size)));
      all.push_back(r);
    }
    on_threads(all, [&](int w) { first[w] = workers[w]->join(); });
  }
  testing::StoreDirectory directory;
  std::shared_ptr<FileStore> store;
  std::vector<std::unique_ptr<ElasticMembership>> workers;
  std::vector<ElasticGeneration> first;
};

TEST(ElasticMembership, EveryWorkerReadsTheSameMembersWhoeverClosesTheGeneration) {
  constexpr int kWorkers = 4;
  Job job(kWorkers);
  const std::vector<ElasticGeneration>& first = job.first;
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(first[w].number, 0);
    EXPECT_EQ(first[w].worker_id, w);  // the resolver's ranks
    EXPECT_EQ(tokens(first[w]), tokens(first[0]));
  }
  ASSERT_EQ(first[0].num_workers(), kWorkers);

  // All of them come to the next generation together, each able to close it.
  std::vector<ElasticGeneration> second(kWorkers);
  on_threads({0, 1, 2, 3}, [&](int w) { second[w] = job.workers[w]->next(first[w]); });
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(second[w].number, 1);
    EXPECT_EQ(second[w].previous_number, 0);
    EXPECT_EQ(second[w].worker_id, w);  // the order of the generation before
    EXPECT_EQ(tokens(second[w]), tokens(first[0]));
  }
}

TEST(ElasticMembership, AGenerationWhoseFirstWorkerDiedBeforeClosingItIsClosedByTheOthers) {
  Job job(3);
  const std::vector<ElasticGeneration>& first = job.first;
  ASSERT_EQ(first[0].num_workers(), 3);

  // Worker 0 comes to generation 1 first, claiming its slot 0 as a worker does (token, host,
  // previous generation, previous id, initial rank, the workers it missed), and dies before
  // closing it.
  const ElasticMember& dead = first[0].members[0];
  const std::string claim = dead.token + "\n" + dead.host + "\n0\n0\n-1\n";
  ASSERT_TRUE(store_claim(*job.store, "job/elastic/g1/slot-0", {claim.begin(), claim.end()}));

  // Every worker of generation 0 has come to generation 1: workers 1 and 2 close it at once, with
  // worker 0 in it (they cannot know it died).
  std::vector<ElasticGeneration> second(3);
  const auto start = std::chrono::steady_clock::now();
  on_threads({1, 2}, [&](int w) { second[w] = job.workers[w]->next(first[w]); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  for (int w : {1, 2}) {
    EXPECT_EQ(second[w].number, 1);
    EXPECT_EQ(second[w].worker_id, w);
    EXPECT_EQ(tokens(second[w]), tokens(first[0]));
  }

  // Their connections to it fail; in generation 2 it never comes, and after the settle time the
  // two close it without it.
  std::vector<ElasticGeneration> third(3);
  on_threads({1, 2}, [&](int w) { third[w] = job.workers[w]->next(second[w]); });
  for (int w : {1, 2}) {
    EXPECT_EQ(third[w].number, 2);
    EXPECT_EQ(third[w].worker_id, w - 1);
    ASSERT_EQ(third[w].num_workers(), 2);
    EXPECT_EQ(third[w].members[0].token, first[0].members[1].token);
    EXPECT_EQ(third[w].members[0].previous_id, 1);
    EXPECT_EQ(third[w].members[1].token, first[0].members[2].token);
    EXPECT_EQ(third[w].members[1].previous_id, 2);
  }
}

// Worker 2 dies. Workers 1 and 3 give up waiting for it and say so; worker 0, whose wait began
// later (a busy machine), gives up 0.8 s after them, past the settle time: they had seen it
// alive, so generation 1 waits for it, and has the three.
TEST(ElasticMembership, ASurvivorThatGivesUpLaterIsWaitedForWhenTheOthersHadSeenIt) {
  Job job(4);
  const std::vector<ElasticGeneration>& first = job.first;
  std::vector<ElasticGeneration> second(4);
  on_threads({0, 1, 3}, [&](int w) {
    if (w == 0) std::this_thread::sleep_for(800ms);
    second[w] = job.workers[w]->next(first[w], {2});
  });
  for (int w : {0, 1, 3}) {
    EXPECT_EQ(second[w].number, 1);
    ASSERT_EQ(second[w].num_workers(), 3) << "worker " << w;
    EXPECT_EQ(second[w].worker_id, w == 3 ? 2 : w);
  }
}

// The survivors missed workers 0 and 2: neither is waited for past the settle time. And where they
// saw worker 0 but it never comes (it died after), the wait ends at survivor_wait.
TEST(ElasticMembership, WorkersTheSurvivorsMissedOrThatNeverComeAreNotWaitedFor) {
  {
    Job job(4);
    std::vector<ElasticGeneration> second(4);
    const auto start = std::chrono::steady_clock::now();
    on_threads({1, 3}, [&](int w) { second[w] = job.workers[w]->next(job.first[w], {0, 2}); });
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1200ms);
    EXPECT_EQ(second[1].num_workers(), 2);
  }
  Job job(4);
  std::vector<ElasticGeneration> second(4);
  const auto start = std::chrono::steady_clock::now();
  on_threads({1, 3}, [&](int w) { second[w] = job.workers[w]->next(job.first[w], {2}); });
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 1500ms);
  EXPECT_LT(waited, 4s);
  EXPECT_EQ(second[1].num_workers(), 2);
  EXPECT_EQ(second[3].worker_id, 1);
}

TEST(ElasticMembership, ANewcomerToAJobWhoseWorkersAreGoneGivesUpAtItsTimeoutSayingWhy) {
  Job job(2);
  ASSERT_EQ(job.first[0].num_workers(), 2);

  // The two have ended (or a second run of the job meets the first one's keys): a newcomer waits
  // for them at generation 1 until its timeout.
  ElasticMembershipOptions options = options_of(0, 2);
  options.timeout = 500ms;
  ElasticMembership newcomer(job.store, options);
  try {
    newcomer.join();
    ADD_FAILURE() << "a newcomer joined a job whose workers are gone";
  } catch (const DeadlineExceededError& e) {
    EXPECT_STREQ(e.what(),
                 "elastic membership: waited 500 ms to join the job, and none of its 2 workers of generation 0 came "
                 "to the next one: the job has ended, or this is another run under the same job id, which finds the "
                 "last run's keys (give each run its own id, or a fresh store)");
  }
  // Closed with nobody: a later newcomer goes on to generation 2.
  EXPECT_TRUE(cluster::gloo_backend::store_holds(*job.store, "job/elastic/g1/members"));
}

}  // namespace
}  // namespace distribute::detail
