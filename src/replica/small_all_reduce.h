// distribute::detail: SmallAllReduce, the path of an all_reduce or reduce_scatter of a few bytes
// between the replicas (threads) of one process sharing host memory, in one cache-line transfer
// per peer.
//
// The rendezvous path of a collective moves several lines between cores: the arrival counter,
// each replica's call for the comparison, the staged inputs, the release. For a loss, a metric or
// a gradient norm, that is the whole cost. Here each replica owns a line per collective (two,
// alternating, so that a line is rewritten only after every peer has read it: a replica reaches
// collective k + 2 only after all have posted k + 1, which each does after reading k) holding
// the collective's sequence, the digest of its signature and the payload itself. A replica posts
// its line, reads its peers', and when all are eligible collectives with equal digests, reduces
// the payloads (a reduce_scatter: its own shard of them) in replica order itself: every replica
// computes the same bits, and no replica waits for another to finish.
//
// Every collective of a group that has this path posts a line, eligible or not, so the replicas
// always take the same decision from the same lines: when any line is not eligible or its digest
// differs, all of them go on to the rendezvous, whose comparison of the whole calls names what
// differed (and a digest that hides a difference takes a 64-bit collision, as for the leaf
// digest). A failed run wakes the waiters, which then leave with the run's release error; a
// deadline names the replicas whose line has not come.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/wait.h"
#include "distribute/replica/internal/collective_call.h"

namespace distribute::detail {

class SmallAllReduce {
 public:
  // The most bytes of payload a line carries: every leaf packed from an 8-byte boundary.
  static constexpr std::size_t kPayloadBytes = 48;

  explicit SmallAllReduce(int size);

  // On replica rank's thread as its part of a run begins: its lines of earlier runs no longer
  // match. Each replica keeps its own count of runs (every replica begins every run, so the counts
  // agree), so that no line is written between runs for the replicas to fetch again.
  void begin(int rank) { ++lines_[static_cast<std::size_t>(rank)].epoch; }

  // Posts rank's line for `call`, whose sequence is set; returns whether the line is eligible
  // (an all_reduce or reduce_scatter whose leaves fit the payload), carrying the payload.
  bool post(int rank, const CollectiveCall& call);

  enum class Outcome {
    kDone,       // every line matched: call's outputs hold the result
    kMismatch,   // some line is not eligible or has another digest than rank's: take the rendezvous
    kTimedOut,   // the deadline passed first: behind() names who is missing
    kCancelled,  // `cancelled` turned true first (the run failed)
  };
  // After rank posted an eligible line for `call`: waits for the peers' lines of the same
  // collective, then reduces. The timeout counts from the start of the wait; lines that have all
  // come already cost no reading of the clock. `meanwhile` runs once before waiting, when some
  // line has not come.
  template <class Cancelled, class Meanwhile>
  Outcome complete(int rank, const CollectiveCall& call, std::chrono::duration<double> timeout,
                   const WaitPolicy& policy, Cancelled&& cancelled, Meanwhile&& meanwhile);

  // The replicas whose line for rank's collective `sequence` has not come.
  std::vector<int> behind(int rank, std::int64_t sequence) const;

  // Wakes every waiter, so that it sees the run's failure.
  void wake_all() { mail_.bump_and_wake_all(); }

 private:
  struct alignas(64) Line {
    // (epoch << 33) | (sequence << 1) | eligible; written last, with the line's other fields.
    std::atomic<std::uint64_t> tag{0};
    std::uint64_t digest = 0;
    alignas(8) std::byte payload[kPayloadBytes];
  };
  struct Lines {
    Line line[2];  // collective k uses line k % 2
    // This replica's own thread's only: the runs it began, and the digest of its last post.
    alignas(64) std::uint64_t epoch = 0;
    std::uint64_t digest = 0;
  };

  // rank's tag for its collective `sequence` of this run.
  std::uint64_t tag_of(int rank, std::int64_t sequence, bool eligible) const {
    return lines_[static_cast<std::size_t>(rank)].epoch << 33 | static_cast<std::uint64_t>(sequence) << 1 |
           (eligible ? 1 : 0);
  }
  // Whether replica r's line for rank's collective `sequence` has come (eligible or not).
  bool has_posted(int r, int rank, std::int64_t sequence) const {
    return (line(r, sequence).tag.load(std::memory_order_seq_cst) >> 1) == tag_of(rank, sequence, false) >> 1;
  }
  const Line& line(int rank, std::int64_t sequence) const {
    return lines_[static_cast<std::size_t>(rank)].line[sequence & 1];
  }
  // Whether every peer's line of `sequence` has come.
  bool all_posted(int rank, std::int64_t sequence) const;
  Outcome reduce(int rank, const CollectiveCall& call) const;

  const int size_;
  std::unique_ptr<Lines[]> lines_;
  // Woken after a post only when a waiter sleeps, so a post costs no shared write otherwise.
  alignas(64) WaitWord mail_;
};

template <class Cancelled, class Meanwhile>
SmallAllReduce::Outcome SmallAllReduce::complete(int rank, const CollectiveCall& call,
                                                 std::chrono::duration<double> timeout, const WaitPolicy& policy,
                                                 Cancelled&& cancelled, Meanwhile&& meanwhile) {
  const std::int64_t sequence = call.op.sequence;
  if (all_posted(rank, sequence)) return reduce(rank, call);
  meanwhile();
  const Deadline deadline = deadline_after(timeout);
  while (!all_posted(rank, sequence)) {
    if (cancelled()) return Outcome::kCancelled;
    const std::uint32_t old = mail_.value.load(std::memory_order_seq_cst);
    if (!mail_.wait_while_equal(old, deadline, policy, [&] { return cancelled() || all_posted(rank, sequence); })) {
      return Outcome::kTimedOut;
    }
  }
  return reduce(rank, call);
}

}  // namespace distribute::detail
