// collective::Rendezvous, the barrier behind every collective and merge_call: reusable phases whose
// completion function runs once and is visible to all, abort (with the error's own type) and
// reset, deadlines that withdraw the waiting rank, behind(), and the uninterruptible variant.
// Every test runs its ranks as threads under a Watchdog, with 2, 3, 4 and 8 ranks. Also the pacing
// of polls of what cannot be waited on (CUDA streams, NCCL communicators).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/prctl.h>

#include "base/wait.h"
#include "collective/rendezvous.h"
#include "distribute/errors.h"
#include "testing/error_expect.h"
#include "testing/replica_harness.h"

namespace distribute::collective {
namespace {

using namespace std::chrono_literals;
using Outcome = Rendezvous::Outcome;
using testing::expect_error;
using testing::Watchdog;

// Not derived from distribute::Error: abort must hand back any exception with its own type.
struct StopError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr int kPhases = 300;

// Runs fn(rank) on one thread per rank and returns what each rank threw (nullptr if nothing).
std::vector<std::exception_ptr> run_ranks(const std::vector<int>& ranks, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(ranks[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

std::vector<int> all_ranks(int n) {
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  return ranks;
}

// Spins (yielding) until every rank in `waiting` has arrived at the phase `absent` has not.
void wait_until_arrived(const Rendezvous& r, const std::vector<int>& waiting, const std::vector<int>& absent) {
  auto arrived = [&] {
    for (int rank : waiting) {
      if (r.behind(rank) != absent) return false;
    }
    return true;
  };
  while (!arrived()) std::this_thread::yield();
}

void no_op() {}

class RendezvousTest : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
  // The ranks but the last, which stays away in the abort and timeout tests.
  std::vector<int> all_but_last() const {
    std::vector<int> ranks = all_ranks(n());
    ranks.pop_back();
    return ranks;
  }
};

INSTANTIATE_TEST_SUITE_P(Ranks, RendezvousTest, ::testing::Values(2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "ranks"; });

// Each phase sums what every rank wrote before arriving. The plain (non-atomic) variables check
// the happens-before promise: complete() sees every rank's write, and every rank sees complete()'s.
// Both with the default policy and with the one used when threads outnumber cores (no spinning:
// yield, then park).
TEST_P(RendezvousTest, CompletionRunsOncePerPhaseAndIsVisibleToAll) {
  Watchdog watchdog(40s, "phases");
  detail::WaitPolicy no_spin;
  no_spin.spin = std::chrono::nanoseconds::zero();
  for (const detail::WaitPolicy& policy : {detail::WaitPolicy{}, no_spin}) {
    SCOPED_TRACE(policy.spin.count() == 0 ? "no spin" : "default policy");
    Rendezvous r(n(), policy);
    EXPECT_EQ(r.size(), n());
    std::vector<int> contribution(static_cast<std::size_t>(n()));
    int completions = 0;
    int sum = 0;
    std::vector<int> wrong(static_cast<std::size_t>(n()));
    const auto errors = run_ranks(all_ranks(n()), [&](int rank) {
      for (int phase = 0; phase < kPhases; ++phase) {
        contribution[static_cast<std::size_t>(rank)] = phase * (rank + 1);
        const Outcome outcome = r.arrive_and_wait(rank, detail::kNoDeadline, [&] {
          ++completions;
          sum = 0;
          for (int c : contribution) sum += c;
        });
        const int expected_sum = phase * n() * (n() + 1) / 2;
        if (outcome != Outcome::kCompleted || completions != phase + 1 || sum != expected_sum) {
          ++wrong[static_cast<std::size_t>(rank)];
        }
      }
    });
    for (int rank = 0; rank < n(); ++rank) {
      EXPECT_FALSE(errors[static_cast<std::size_t>(rank)]) << "rank " << rank << " threw";
      EXPECT_EQ(wrong[static_cast<std::size_t>(rank)], 0) << "rank " << rank;
    }
    EXPECT_EQ(completions, kPhases);
    for (int rank = 0; rank < n(); ++rank) EXPECT_TRUE(r.behind(rank).empty());
  }
}

// The last to arrive runs complete(), on its own thread, after every rank has arrived.
TEST_P(RendezvousTest, CompletionRunsOnAParticipantAfterAllArrived) {
  Watchdog watchdog(10s, "last arriver");
  Rendezvous r(n(), detail::WaitPolicy{});
  std::atomic<int> arrived{0};
  std::vector<std::thread::id> ids(static_cast<std::size_t>(n()));
  std::thread::id completer;
  int arrived_at_completion = -1;
  run_ranks(all_ranks(n()), [&](int rank) {
    ids[static_cast<std::size_t>(rank)] = std::this_thread::get_id();
    arrived.fetch_add(1);
    r.arrive_and_wait(rank, detail::kNoDeadline, [&] {
      completer = std::this_thread::get_id();
      arrived_at_completion = arrived.load();
    });
  });
  EXPECT_EQ(arrived_at_completion, n());
  EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).count(completer), 1u);
}

// `meanwhile` runs once on every rank, as soon as its arrival counts: the ranks that wait run it
// before the phase can complete (the last rank arrives only after all the others' have run, which
// never happens if they run it once released), and the last arriver runs it after complete().
TEST_P(RendezvousTest, MeanwhileRunsOnceOnEveryRankWhileTheOthersAreAway) {
  Watchdog watchdog(20s, "meanwhile");
  Rendezvous r(n(), detail::WaitPolicy{});
  const int last = n() - 1;
  std::atomic<int> waiters_ran{0};
  int ran_before_last_arrived = -1;
  int completions = 0;
  int completions_seen_by_last = -1;
  std::vector<int> runs(static_cast<std::size_t>(n()));
  const auto errors = run_ranks(all_ranks(n()), [&](int rank) {
    if (rank == last) {
      const auto give_up = std::chrono::steady_clock::now() + 5s;
      while (waiters_ran.load() < n() - 1 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      ran_before_last_arrived = waiters_ran.load();
    }
    const Outcome outcome = r.arrive_and_wait(
        rank, detail::deadline_after(10s), [&] { ++completions; },
        [&] {
          ++runs[static_cast<std::size_t>(rank)];
          if (rank == last) {
            completions_seen_by_last = completions;
          } else {
            waiters_ran.fetch_add(1);
          }
        });
    EXPECT_EQ(outcome, Outcome::kCompleted) << "rank " << rank;
  });
  for (int rank = 0; rank < n(); ++rank) {
    EXPECT_FALSE(errors[static_cast<std::size_t>(rank)]) << "rank " << rank << " threw";
    EXPECT_EQ(runs[static_cast<std::size_t>(rank)], 1) << "rank " << rank;
  }
  EXPECT_EQ(ran_before_last_arrived, n() - 1);
  EXPECT_EQ(completions, 1);
  EXPECT_EQ(completions_seen_by_last, 1);
}

TEST(Rendezvous, OneRankCompletesAtOnce) {
  Watchdog watchdog(10s, "one rank");
  Rendezvous r(1, detail::WaitPolicy{});
  int completions = 0;
  for (int phase = 0; phase < 5; ++phase) {
    EXPECT_EQ(r.arrive_and_wait(0, detail::deadline_after(1ms), [&] { ++completions; }), Outcome::kCompleted);
  }
  r.arrive_and_wait_uninterruptible();
  EXPECT_EQ(completions, 5);
  EXPECT_TRUE(r.behind(0).empty());
}

// arrive() does not wait. When every rank arrived through it, the last one's completion hears
// that nobody waits; when one rank waits in the same phase, it hears otherwise and that rank is
// released once the others have arrived.
TEST_P(RendezvousTest, ArriveWithoutWaitingTellsTheCompletionWhetherEveryRankLeft) {
  // 600 phases of n fresh threads (as "phases" has 300): under ThreadSanitizer on 2 cores this
  // takes over 10 s, which is no hang.
  Watchdog watchdog(40s, "arrive without waiting");
  Rendezvous r(n(), detail::WaitPolicy{});
  std::atomic<int> completions{0};
  std::atomic<int> every_rank_left{0};
  const auto complete = [&](bool left) {
    ++completions;
    if (left) ++every_rank_left;
  };
  for (int phase = 0; phase < kPhases; ++phase) {
    const auto errors = run_ranks(all_ranks(n()), [&](int rank) { r.arrive(rank, complete); });
    for (const auto& error : errors) EXPECT_FALSE(error);
  }
  EXPECT_EQ(completions, kPhases);
  EXPECT_EQ(every_rank_left, kPhases);
  for (int rank = 0; rank < n(); ++rank) EXPECT_TRUE(r.behind(rank).empty());

  for (int phase = 0; phase < kPhases; ++phase) {
    const auto errors = run_ranks(all_ranks(n()), [&](int rank) {
      if (rank == 0) {
        EXPECT_EQ(r.arrive_and_wait(rank, detail::kNoDeadline, [&] { complete(false); }), Outcome::kCompleted);
      } else {
        r.arrive(rank, complete);
      }
    });
    for (const auto& error : errors) EXPECT_FALSE(error);
  }
  EXPECT_EQ(completions, 2 * kPhases);
  EXPECT_EQ(every_rank_left, kPhases);
}

// The arrivals of a phase and of those arriving without waiting share one word: 65535 at most.
TEST(Rendezvous, ParticipantsOutsideItsRangeAreRefused) {
  for (int size : {0, 65536}) {
    try {
      Rendezvous r(size, detail::WaitPolicy{});
      ADD_FAILURE() << size << " participants were accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("a rendezvous of " + std::to_string(size) +
                                           " participants; it takes 1 to 65535"),
                std::string::npos)
          << e.what();
    }
  }
}

// Ranks that have arrived are ahead of those that have not; once the phase completes nobody is behind.
TEST_P(RendezvousTest, BehindListsTheRanksThatHaveNotArrived) {
  Watchdog watchdog(10s, "behind");
  Rendezvous r(n(), detail::WaitPolicy{});
  const int last = n() - 1;
  for (int rank = 0; rank < n(); ++rank) EXPECT_TRUE(r.behind(rank).empty());
  // The last rank arrives only once every other rank is waiting, and only then can the phase complete.
  std::thread late([&] {
    wait_until_arrived(r, all_but_last(), {last});
    EXPECT_EQ(r.behind(last), std::vector<int>{});
    r.arrive_and_wait(last, detail::kNoDeadline, no_op);
  });
  const auto errors = run_ranks(all_but_last(), [&](int rank) {
    EXPECT_EQ(r.arrive_and_wait(rank, detail::kNoDeadline, no_op), Outcome::kCompleted);
  });
  late.join();
  for (const auto& error : errors) EXPECT_FALSE(error);
  for (int rank = 0; rank < n(); ++rank) EXPECT_TRUE(r.behind(rank).empty()) << "rank " << rank;
}

TEST_P(RendezvousTest, AbortReleasesWaitersWithTheErrorItself) {
  Watchdog watchdog(10s, "abort");
  Rendezvous r(n(), detail::WaitPolicy{});
  const int last = n() - 1;
  int completions = 0;
  std::thread aborter([&] {
    // Every rank but the last is past the entry check, so the abort must wake them from the wait.
    wait_until_arrived(r, all_but_last(), {last});
    r.abort(std::make_exception_ptr(StopError("replica 1 failed")));
  });
  const auto errors = run_ranks(all_but_last(), [&](int rank) {
    r.arrive_and_wait(rank, detail::kNoDeadline, [&] { ++completions; });
  });
  aborter.join();
  for (const auto& error : errors) expect_error<StopError>(error, {"replica 1 failed"});
  EXPECT_TRUE(r.aborted());
  EXPECT_EQ(completions, 0);

  // Later arrivals throw the first abort's error; a second abort changes nothing.
  r.abort(std::make_exception_ptr(AbortedError("second")));
  for (int rank = 0; rank < n(); ++rank) {
    const auto later = run_ranks({rank}, [&](int me) { r.arrive_and_wait(me, detail::kNoDeadline, no_op); });
    expect_error<StopError>(later[0], {"replica 1 failed"});
  }
  EXPECT_EQ(completions, 0);

  r.reset();
  EXPECT_FALSE(r.aborted());
  for (int rank = 0; rank < n(); ++rank) EXPECT_TRUE(r.behind(rank).empty());
  const auto after = run_ranks(all_ranks(n()), [&](int rank) {
    for (int phase = 0; phase < 10; ++phase) {
      EXPECT_EQ(r.arrive_and_wait(rank, detail::kNoDeadline, [&] { ++completions; }), Outcome::kCompleted);
    }
  });
  for (const auto& error : after) EXPECT_FALSE(error);
  EXPECT_EQ(completions, 10);
}

// The library aborts from inside complete() when the replicas' calls do not match: every rank,
// the one that ran complete() too, then throws that error.
TEST_P(RendezvousTest, AbortFromTheCompletionReachesEveryRank) {
  Watchdog watchdog(10s, "abort in complete");
  Rendezvous r(n(), detail::WaitPolicy{});
  int completions = 0;
  const auto errors = run_ranks(all_ranks(n()), [&](int rank) {
    r.arrive_and_wait(rank, detail::kNoDeadline, [&] {
      ++completions;
      r.abort(std::make_exception_ptr(InvalidArgumentError("mismatched calls")));
    });
  });
  EXPECT_EQ(completions, 1);
  for (const auto& error : errors) expect_error<InvalidArgumentError>(error, {"mismatched calls"});
  r.reset();
  const auto after = run_ranks(all_ranks(n()), [&](int rank) {
    EXPECT_EQ(r.arrive_and_wait(rank, detail::kNoDeadline, [&] { ++completions; }), Outcome::kCompleted);
  });
  for (const auto& error : after) EXPECT_FALSE(error);
  EXPECT_EQ(completions, 2);
}

// An abort while the last rank runs complete() (a replica that raised while its async lane was in
// the phase) must not release the waiters before complete() returns: it may read their calls'
// buffers, which they free as they unwind. They then throw the abort's error, as does the last.
TEST_P(RendezvousTest, AbortDuringCompletionReleasesWaitersOnlyOnceItReturns) {
  Watchdog watchdog(10s, "abort during complete");
  Rendezvous r(n(), detail::WaitPolicy{});
  std::atomic<bool> completion_returned{false};
  std::thread aborter;
  std::vector<unsigned char> left_after_completion(static_cast<std::size_t>(n()), 0);
  const auto errors = run_ranks(all_ranks(n()), [&](int rank) {
    try {
      r.arrive_and_wait(rank, detail::kNoDeadline, [&] {
        aborter = std::thread([&] { r.abort(std::make_exception_ptr(StopError("replica 0 raised"))); });
        while (!r.aborted()) std::this_thread::yield();
        std::this_thread::sleep_for(50ms);  // the waiters, woken by the abort, must still be here
        completion_returned = true;
      });
    } catch (...) {
      left_after_completion[static_cast<std::size_t>(rank)] = completion_returned.load() ? 1 : 0;
      throw;
    }
  });
  aborter.join();
  for (int rank = 0; rank < n(); ++rank) {
    expect_error<StopError>(errors[static_cast<std::size_t>(rank)], {"replica 0 raised"});
    EXPECT_TRUE(left_after_completion[static_cast<std::size_t>(rank)]) << "rank " << rank;
  }
}

// The last rank never comes: each waiter's deadline passes, it withdraws and reports who is missing.
TEST_P(RendezvousTest, DeadlineWithARankAbsentTimesOut) {
  Watchdog watchdog(10s, "timeout");
  Rendezvous r(n(), detail::WaitPolicy{});
  const int last = n() - 1;
  int completions = 0;
  std::vector<Outcome> outcomes(static_cast<std::size_t>(n()), Outcome::kCompleted);
  const auto errors = run_ranks(all_but_last(), [&](int rank) {
    outcomes[static_cast<std::size_t>(rank)] =
        r.arrive_and_wait(rank, detail::deadline_after(30ms), [&] { ++completions; });
  });
  // Asked once all have timed out, so that a rank whose thread started late is not missing too.
  for (int rank : all_but_last()) {
    const auto i = static_cast<std::size_t>(rank);
    EXPECT_FALSE(errors[i]);
    EXPECT_EQ(outcomes[i], Outcome::kTimedOut) << "rank " << rank;
    EXPECT_EQ(r.behind(rank), std::vector<int>{last}) << "rank " << rank;
  }
  EXPECT_EQ(completions, 0);
  EXPECT_FALSE(r.aborted());

  // Every waiter withdrew, so the phase is still open: with everyone there it completes once.
  const auto retry = run_ranks(all_ranks(n()), [&](int rank) {
    EXPECT_EQ(r.arrive_and_wait(rank, detail::kNoDeadline, [&] { ++completions; }), Outcome::kCompleted);
  });
  for (const auto& error : retry) EXPECT_FALSE(error);
  EXPECT_EQ(completions, 1);
}

// A rank that timed out no longer counts as arrived: with each rank alone in turn, none is ever
// the last to arrive, so every one of them times out.
TEST_P(RendezvousTest, TimedOutRankWithdrawsItsArrival) {
  Watchdog watchdog(10s, "withdrawal");
  Rendezvous r(n(), detail::WaitPolicy{});
  int completions = 0;
  for (int rank = 0; rank < n(); ++rank) {
    const auto errors = run_ranks({rank}, [&](int me) {
      EXPECT_EQ(r.arrive_and_wait(me, detail::deadline_after(5ms), [&] { ++completions; }), Outcome::kTimedOut)
          << "rank " << me;
    });
    EXPECT_FALSE(errors[0]);
  }
  EXPECT_EQ(completions, 0);
  const auto together = run_ranks(all_ranks(n()), [&](int rank) {
    EXPECT_EQ(r.arrive_and_wait(rank, detail::kNoDeadline, [&] { ++completions; }), Outcome::kCompleted);
  });
  for (const auto& error : together) EXPECT_FALSE(error);
  EXPECT_EQ(completions, 1);
}

// A rank that timed out is still in its phase (behind() names the ranks it waited for), so its
// next arrival at that phase is not a second one: after a timeout and a retry the ranks must not
// look out of step, or behind() names ranks that did arrive and misses ranks that did not.
TEST_P(RendezvousTest, ArrivingAgainAfterATimeoutIsNotASecondArrival) {
  Watchdog watchdog(10s, "behind after withdrawal");
  Rendezvous r(n(), detail::WaitPolicy{});
  const int last = n() - 1;
  run_ranks({0}, [&](int rank) {
    EXPECT_EQ(r.arrive_and_wait(rank, detail::deadline_after(5ms), no_op), Outcome::kTimedOut);
  });
  run_ranks(all_ranks(n()), [&](int rank) { r.arrive_and_wait(rank, detail::kNoDeadline, no_op); });
  for (int rank = 0; rank < n(); ++rank) EXPECT_EQ(r.behind(rank), std::vector<int>{}) << "rank " << rank;

  // The next phase: every rank but the last arrives and times out; the last is the one missing.
  run_ranks(all_but_last(), [&](int rank) {
    EXPECT_EQ(r.arrive_and_wait(rank, detail::deadline_after(30ms), no_op), Outcome::kTimedOut);
  });
  for (int rank : all_but_last()) EXPECT_EQ(r.behind(rank), std::vector<int>{last}) << "rank " << rank;
}

// A waiter whose deadline passes while the last rank runs complete() waits for it and completes.
// The deadline must pass inside complete(): if a slow scheduler lets it pass before the last rank
// arrives, both ranks withdraw and the attempt is repeated with a fresh rendezvous.
TEST(Rendezvous, DeadlineDoesNotInterruptABegunCompletion) {
  Watchdog watchdog(20s, "deadline during complete");
  int exercised = 0;
  for (int attempt = 0; attempt < 5 && exercised == 0; ++attempt) {
    Rendezvous r(2, detail::WaitPolicy{});
    const detail::Deadline deadline = detail::deadline_after(100ms);
    Outcome waiter = Outcome::kCompleted;
    std::atomic<bool> returned{false};
    std::thread first([&] {
      waiter = r.arrive_and_wait(0, deadline, no_op);
      returned = true;
    });
    while (r.behind(0) != std::vector<int>{1} && !returned) std::this_thread::yield();
    bool completed_here = false;
    const Outcome last = r.arrive_and_wait(1, deadline + 1s, [&] {
      completed_here = true;
      std::this_thread::sleep_until(deadline + 20ms);
    });
    first.join();
    if (completed_here) {
      EXPECT_EQ(last, Outcome::kCompleted);
      EXPECT_EQ(waiter, Outcome::kCompleted);
      ++exercised;
    } else {
      EXPECT_EQ(last, Outcome::kTimedOut);
      EXPECT_EQ(waiter, Outcome::kTimedOut);
    }
  }
  EXPECT_EQ(exercised, 1);
}

TEST_P(RendezvousTest, UninterruptiblePhases) {
  Watchdog watchdog(20s, "uninterruptible");
  Rendezvous r(n(), detail::WaitPolicy{});
  std::vector<int> slots(static_cast<std::size_t>(n()));
  std::vector<int> wrong(static_cast<std::size_t>(n()));
  run_ranks(all_ranks(n()), [&](int rank) {
    for (int phase = 0; phase < kPhases; ++phase) {
      slots[static_cast<std::size_t>(rank)] = phase;
      r.arrive_and_wait_uninterruptible();
      // Between two barriers every rank reads what all wrote before the first.
      for (int s : slots) {
        if (s != phase) ++wrong[static_cast<std::size_t>(rank)];
      }
      r.arrive_and_wait_uninterruptible();
    }
  });
  for (int rank = 0; rank < n(); ++rank) EXPECT_EQ(wrong[static_cast<std::size_t>(rank)], 0) << "rank " << rank;
}

TEST_P(RendezvousTest, UninterruptibleIgnoresAnAbort) {
  Watchdog watchdog(10s, "uninterruptible after abort");
  Rendezvous r(n(), detail::WaitPolicy{});
  r.abort(std::make_exception_ptr(StopError("stop")));
  const auto errors = run_ranks(all_ranks(n()), [&](int) {
    for (int phase = 0; phase < 10; ++phase) r.arrive_and_wait_uninterruptible();
  });
  for (const auto& error : errors) EXPECT_FALSE(error);
  EXPECT_TRUE(r.aborted());
}

// A spinning waiter holds the core that a thread it waits for may need: once threads outnumber
// cores, waiters yield from the start.
TEST(WaitPolicy, SpinsOnlyWhileEveryThreadHasACore) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_GT(detail::WaitPolicy::for_threads(cores).spin.count(), 0);
  EXPECT_EQ(detail::WaitPolicy::for_threads(cores + 1).spin.count(), 0);
  EXPECT_GT(detail::WaitPolicy::for_threads(cores + 1).yield.count(), 0);
}

// A wait past the yielding phase sleeps with the thread's timer slack at 1 µs (so that a stream
// drained mid-sleep is seen within microseconds), and the thread gets its own slack back after.
TEST(PollPacer, SleepsWithATightTimerSlackAndRestoresTheThreads) {
  ASSERT_EQ(prctl(PR_SET_TIMERSLACK, 70000UL, 0, 0, 0), 0);
  {
    detail::PollPacer pacer;
    // Read after the pacer's own start, so that a wait past kYieldFor here is one for the pacer.
    const auto start = detail::Clock::now();
    EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 70000) << "nothing slept yet: the slack is untouched";
    while (detail::Clock::now() - start <= detail::PollPacer::kYieldFor) pacer.pause();
    pacer.pause();
    EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 1000);
  }
  EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 70000);
}

}  // namespace
}  // namespace distribute::collective
