// cluster::ring_all_reduce over threads: each rank a thread, its links to the next and previous
// ranks mailboxes in shared memory. Sums are exact, uneven and tiny parts (fewer elements than
// ranks) work, and every rank ends with the same bits, also where the order of additions matters,
// step by step and pipelined (over links that stream, in pieces); the same for the ring that sends
// float32 values in 16 bits, within its error bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <tuple>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "cluster/ring_all_reduce.h"
#include "testing/replica_harness.h"

namespace distribute::cluster {
namespace {

// What rank r sends reaches rank r + 1's mailbox, in order.
class Mailboxes {
 public:
  explicit Mailboxes(int size) : boxes_(static_cast<std::size_t>(size)) {}

  void put(int rank, std::span<const std::byte> bytes) {
    Box& box = boxes_[static_cast<std::size_t>(rank)];
    {
      std::lock_guard<std::mutex> lock(box.mu);
      box.messages.emplace_back(bytes.begin(), bytes.end());
    }
    box.ready.notify_one();
  }
  std::vector<std::byte> take(int rank) {
    Box& box = boxes_[static_cast<std::size_t>(rank)];
    std::unique_lock<std::mutex> lock(box.mu);
    box.ready.wait(lock, [&] { return !box.messages.empty(); });
    std::vector<std::byte> message = std::move(box.messages.front());
    box.messages.pop_front();
    return message;
  }

 private:
  struct Box {
    std::mutex mu;
    std::condition_variable ready;
    std::deque<std::vector<std::byte>> messages;
  };
  std::vector<Box> boxes_;
};

class ThreadLinks final : public RingLinks {
 public:
  ThreadLinks(Mailboxes& boxes, int rank, int size) : boxes_(boxes), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send_next_receive_previous(std::span<const std::byte> to_next, std::span<std::byte> from_previous) override {
    boxes_.put((rank_ + 1) % size_, to_next);
    const std::vector<std::byte> message = boxes_.take(rank_);
    ASSERT_EQ(message.size(), from_previous.size()) << "rank " << rank_ << " got a part of another size";
    if (!message.empty()) std::memcpy(from_previous.data(), message.data(), message.size());
  }

 private:
  Mailboxes& boxes_;
  const int rank_;
  const int size_;
};

// Links that stream, in pieces of `piece` bytes (the pipelined ring). A thread of the rank's
// delivers each queued message to the next rank's mailbox, copying it only then and after a
// yield: a ring that changed bytes it had queued before the next rank took them would sum wrongly
// (and race, under ThreadSanitizer).
class StreamingThreadLinks final : public RingLinks {
 public:
  StreamingThreadLinks(Mailboxes& boxes, int rank, int size, std::size_t piece)
      : boxes_(boxes), rank_(rank), size_(size), piece_(piece), delivery_([this] { deliver(); }) {}
  ~StreamingThreadLinks() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    changed_.notify_all();
    delivery_.join();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::size_t piece_bytes() const override { return piece_; }
  void send_next(std::span<const std::byte> bytes) override {
    EXPECT_LE(bytes.size(), piece_) << "rank " << rank_ << " sent a message larger than its pieces";
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued_.push_back(bytes);
    }
    changed_.notify_all();
  }
  void receive_previous(std::span<std::byte> into) override {
    const std::vector<std::byte> message = boxes_.take(rank_);
    ASSERT_EQ(message.size(), into.size()) << "rank " << rank_ << " got a piece of another size";
    if (!message.empty()) std::memcpy(into.data(), message.data(), message.size());
  }
  void flush() override {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return queued_.empty(); });
  }
  void send_next_receive_previous(std::span<const std::byte> to_next, std::span<std::byte> from_previous) override {
    send_next(to_next);
    receive_previous(from_previous);
    flush();
  }

 private:
  void deliver() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      changed_.wait(lock, [&] { return !queued_.empty() || stopping_; });
      if (queued_.empty()) return;
      const std::span<const std::byte> next = queued_.front();
      lock.unlock();
      std::this_thread::yield();
      boxes_.put((rank_ + 1) % size_, next);
      lock.lock();
      queued_.pop_front();
      changed_.notify_all();
    }
  }

  Mailboxes& boxes_;
  const int rank_;
  const int size_;
  const std::size_t piece_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::span<const std::byte>> queued_;  // oldest first; the front one until delivered
  bool stopping_ = false;
  std::thread delivery_;  // last: it starts once the rest is made
};

// Runs `reduce(links, rank's data, scratch)` over `size` threads on data[r] (rank r's values),
// leaving every rank's result in data; over links that stream in pieces of `piece` bytes, or
// step by step for 0.
template <class T, class Reduce>
void on_ring_threads(std::vector<std::vector<T>>& data, Reduce reduce, std::size_t piece = 0) {
  const int size = static_cast<int>(data.size());
  testing::Watchdog watchdog(std::chrono::seconds(30), "ring all-reduce test");
  Mailboxes boxes(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::byte> scratch;
      if (piece == 0) {
        ThreadLinks links(boxes, r, size);
        reduce(links, data[static_cast<std::size_t>(r)], scratch);
      } else {
        StreamingThreadLinks links(boxes, r, size, piece);
        reduce(links, data[static_cast<std::size_t>(r)], scratch);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

template <class T>
std::vector<std::vector<T>> run_ring(std::vector<std::vector<T>> data, std::size_t piece = 0) {
  on_ring_threads(
      data,
      [](RingLinks& links, std::vector<T>& mine, std::vector<std::byte>& scratch) {
        ring_all_reduce(links, dtype_v<T>, reinterpret_cast<std::byte*>(mine.data()),
                        static_cast<std::int64_t>(mine.size()), scratch);
      },
      piece);
  return data;
}

// The compressed ring: every rank's result, and what each rank returned (the overflowed rank).
struct CompressedRing {
  std::vector<std::vector<float>> results;
  std::vector<int> overflowed;
};

CompressedRing run_compressed_ring(std::vector<std::vector<float>> data, Compression compression) {
  std::vector<int> overflowed(data.size(), -2);
  on_ring_threads(data, [&](RingLinks& links, std::vector<float>& mine, std::vector<std::byte>& scratch) {
    overflowed[static_cast<std::size_t>(links.rank())] = ring_all_reduce_compressed(
        links, compression, mine.data(), static_cast<std::int64_t>(mine.size()), scratch);
  });
  return {std::move(data), std::move(overflowed)};
}

class RingAllReduce : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
};

TEST_P(RingAllReduce, SumsExactlyWithUnevenAndTinyParts) {
  for (const std::int64_t count : {std::int64_t{1}, std::int64_t{size() - 1}, std::int64_t{1000}, std::int64_t{12345}}) {
    std::vector<std::vector<float>> data(static_cast<std::size_t>(size()));
    for (int r = 0; r < size(); ++r) {
      for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(r)].push_back(static_cast<float>(r + 1 + i % 7));
    }
    const auto results = run_ring(std::move(data));
    for (int r = 0; r < size(); ++r) {
      const std::vector<float>& got = results[static_cast<std::size_t>(r)];
      ASSERT_EQ(got.size(), static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i) {
        const float expected = static_cast<float>(size() * (size() + 1) / 2 + size() * (i % 7));
        ASSERT_EQ(got[static_cast<std::size_t>(i)], expected) << "rank " << r << " element " << i << " of " << count;
      }
    }
  }
}

// Each of `ranks` ranks' `count` values, of magnitudes 1e-9 apart, so that the order in which a
// ring adds them changes the sum's last bits.
std::vector<std::vector<double>> order_sensitive_values(int ranks, int count, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> values(-1e6, 1e6);
  std::vector<std::vector<double>> data(static_cast<std::size_t>(ranks));
  for (auto& mine : data) {
    for (int i = 0; i < count; ++i) mine.push_back(values(random) * (i % 3 == 0 ? 1e-9 : 1.0));
  }
  return data;
}

TEST_P(RingAllReduce, EveryRankHoldsTheSameBits) {
  const std::vector<std::vector<double>> data = order_sensitive_values(size(), 5000, 42);
  const auto results = run_ring(data);
  for (int r = 1; r < size(); ++r) {
    ASSERT_EQ(std::memcmp(results[static_cast<std::size_t>(r)].data(), results[0].data(), 5000 * sizeof(double)), 0)
        << "rank " << r << " differs from rank 0";
  }
  // Each element is the sum of the ranks' values (in some order: within rounding).
  for (int i = 0; i < 5000; i += 499) {
    double sum = 0;
    for (const auto& mine : data) sum += mine[static_cast<std::size_t>(i)];
    EXPECT_NEAR(results[0][static_cast<std::size_t>(i)], sum, 1e-6 * std::max(1.0, std::abs(sum))) << i;
  }
}

TEST_P(RingAllReduce, Int64) {
  std::vector<std::vector<std::int64_t>> data(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) data[static_cast<std::size_t>(r)] = {std::int64_t{1} << 40, -r, r * 1000};
  const auto results = run_ring(std::move(data));
  const std::int64_t n = size();
  for (const auto& got : results) {
    EXPECT_EQ(got, (std::vector<std::int64_t>{n << 40, -n * (n - 1) / 2, 1000 * n * (n - 1) / 2}));
  }
}

// A caller's scratch is kept across calls of different sizes, stale bytes included: a small sum
// between two large ones neither shrinks it (which would make the next large one allocate and
// zero-fill it again) nor lets what an earlier call left there reach a later sum.
TEST_P(RingAllReduce, ReusesOneScratchAcrossSizesWithoutShrinkingIt) {
  const std::vector<std::int64_t> counts = {100000, 10, 100000};
  std::vector<std::vector<std::size_t>> sizes(static_cast<std::size_t>(size()));
  std::vector<std::vector<std::vector<float>>> results(static_cast<std::size_t>(size()));
  std::vector<std::vector<float>> unused(static_cast<std::size_t>(size()));
  on_ring_threads(unused, [&](RingLinks& links, std::vector<float>&, std::vector<std::byte>& scratch) {
    const auto r = static_cast<std::size_t>(links.rank());
    for (const std::int64_t count : counts) {
      std::vector<float> mine(static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i) mine[static_cast<std::size_t>(i)] = static_cast<float>(links.rank() + i % 5);
      ring_all_reduce(links, DType::kFloat32, reinterpret_cast<std::byte*>(mine.data()), count, scratch);
      sizes[r].push_back(scratch.size());
      results[r].push_back(std::move(mine));
    }
  });
  const float rank_sum = static_cast<float>(size() * (size() - 1) / 2);
  for (int r = 0; r < size(); ++r) {
    const auto u = static_cast<std::size_t>(r);
    if (size() > 1) {
      EXPECT_EQ(sizes[u][1], sizes[u][0]) << "rank " << r << ": the small sum shrank the scratch";
      EXPECT_EQ(sizes[u][2], sizes[u][0]) << "rank " << r;
    }
    for (std::size_t c = 0; c < counts.size(); ++c) {
      for (std::int64_t i = 0; i < counts[c]; ++i) {
        ASSERT_EQ(results[u][c][static_cast<std::size_t>(i)], rank_sum + static_cast<float>(size() * (i % 5)))
            << "rank " << r << ", call " << c << ", element " << i;
      }
    }
  }
}

// The pipelined ring (links that stream) in pieces of one element, of a few, and of more than a
// part: the same exact sums, uneven and tiny parts included.
TEST_P(RingAllReduce, PipelinedSumsExactlyInPiecesOfAnySize) {
  // (pieces in elements, counts): each piece size with counts up to some hundred pieces a part.
  const std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> cases = {
      {1, {1, size() - 1, 100}}, {7, {1, size() - 1, 1000}}, {4000, {1000, 12345}}};
  for (const auto& [elements, counts] : cases) {
    const std::size_t piece = static_cast<std::size_t>(elements) * sizeof(float);
    for (const std::int64_t count : counts) {
      std::vector<std::vector<float>> data(static_cast<std::size_t>(size()));
      for (int r = 0; r < size(); ++r) {
        for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(r)].push_back(static_cast<float>(r + 1 + i % 7));
      }
      const auto results = run_ring(std::move(data), piece);
      for (int r = 0; r < size(); ++r) {
        for (std::int64_t i = 0; i < count; ++i) {
          const float want = static_cast<float>(size() * (size() + 1) / 2 + size() * (i % 7));
          ASSERT_EQ(results[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], want)
              << "pieces of " << piece << " bytes, count " << count << ", rank " << r << ", element " << i;
        }
      }
    }
  }
}

// Where the order of additions matters, the pipelined ring adds in the stepwise ring's order: both
// give every rank the very same bits.
TEST_P(RingAllReduce, PipelinedGivesTheStepwiseRingsBits) {
  const std::vector<std::vector<double>> data = order_sensitive_values(size(), 5001, 7);
  const auto stepwise = run_ring(data);
  for (const std::size_t piece : {50 * sizeof(double), 999 * sizeof(double)}) {
    const auto pipelined = run_ring(data, piece);
    for (int r = 0; r < size(); ++r) {
      const auto u = static_cast<std::size_t>(r);
      ASSERT_EQ(std::memcmp(pipelined[u].data(), stepwise[0].data(), 5001 * sizeof(double)), 0)
          << "pieces of " << piece << " bytes: rank " << r << " differs from the stepwise ring";
    }
  }
}

TEST_P(RingAllReduce, PipelinedInt64) {
  std::vector<std::vector<std::int64_t>> data(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) data[static_cast<std::size_t>(r)] = {std::int64_t{1} << 40, -r, r * 1000};
  const auto results = run_ring(std::move(data), sizeof(std::int64_t));
  const std::int64_t n = size();
  for (const auto& got : results) {
    EXPECT_EQ(got, (std::vector<std::int64_t>{n << 40, -n * (n - 1) / 2, 1000 * n * (n - 1) / 2}));
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, RingAllReduce, ::testing::Values(1, 2, 3, 4, 7),
                         [](const ::testing::TestParamInfo<int>& ranks) { return std::to_string(ranks.param) + "ranks"; });

// The compressed ring at 2, 3, 4 and 8 ranks: the bound of docs/overlap.md, the same bits on every
// rank, exact sums where 16 bits hold every partial sum, and overflow reported by every rank.
class CompressedRingAllReduce : public ::testing::TestWithParam<std::tuple<int, Compression>> {
 protected:
  int size() const { return std::get<0>(GetParam()); }
  Compression compression() const { return std::get<1>(GetParam()); }
  // The unit roundoff of the format and half its smallest subnormal.
  double unit_roundoff() const { return compression() == Compression::kFloat16 ? 0x1p-11 : 0x1p-8; }
  double absolute_floor() const { return compression() == Compression::kFloat16 ? 0x1p-25 : 0x1p-134; }
};

TEST_P(CompressedRingAllReduce, WithinTheBoundAndTheSameBitsEverywhere) {
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> values(-100, 100);
  std::uniform_int_distribution<int> exponent(-30, 8);
  for (const std::int64_t count : {std::int64_t{1}, std::int64_t{size() - 1}, std::int64_t{4099}}) {
    std::vector<std::vector<float>> data(static_cast<std::size_t>(size()));
    for (auto& mine : data) {
      for (std::int64_t i = 0; i < count; ++i) {
        mine.push_back(static_cast<float>(values(random) * std::ldexp(1.0, exponent(random)) / 256));
      }
    }
    const CompressedRing ring = run_compressed_ring(data, compression());
    for (int r = 0; r < size(); ++r) {
      EXPECT_EQ(ring.overflowed[static_cast<std::size_t>(r)], -1) << "rank " << r;
      ASSERT_EQ(std::memcmp(ring.results[static_cast<std::size_t>(r)].data(), ring.results[0].data(),
                            static_cast<std::size_t>(count) * sizeof(float)),
                0)
          << "rank " << r << " differs from rank 0, count " << count;
    }
    const double n = size();
    for (std::int64_t i = 0; i < count; ++i) {
      double sum = 0;
      double magnitude = 0;
      for (const auto& mine : data) {
        sum += mine[static_cast<std::size_t>(i)];
        magnitude += std::abs(mine[static_cast<std::size_t>(i)]);
      }
      // n roundings to 16 bits (n - 1 hops and the owner's), each of a partial sum no larger than
      // the sum of magnitudes, and n float32 additions.
      const double bound = n * ((unit_roundoff() + 0x1p-24) * magnitude * (1 + n * unit_roundoff()) + absolute_floor());
      ASSERT_LE(std::abs(ring.results[0][static_cast<std::size_t>(i)] - sum), bound)
          << "element " << i << " of " << count << ": sum " << sum;
    }
  }
}

TEST_P(CompressedRingAllReduce, ExactWhereSixteenBitsHoldEveryPartialSum) {
  // Small integers and their sums fit both formats' 8 (bfloat16) and 11 (float16) bits.
  std::vector<std::vector<float>> data(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) {
    for (int i = 0; i < 1000; ++i) data[static_cast<std::size_t>(r)].push_back(static_cast<float>((r + i) % 9 - 4));
  }
  const CompressedRing ring = run_compressed_ring(data, compression());
  for (int i = 0; i < 1000; ++i) {
    float sum = 0;
    for (int r = 0; r < size(); ++r) sum += static_cast<float>((r + i) % 9 - 4);
    for (int r = 0; r < size(); ++r) ASSERT_EQ(ring.results[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], sum);
  }
}

TEST_P(CompressedRingAllReduce, EveryRankReportsTheOverflow) {
  // One element overflows: in float16 only in its partial sums (40000 fits, 80000 does not), in
  // bfloat16 where a finite float32 above its largest rounds up to inf. Its
  // part's owner, which one rank is, flags it; infs and NaNs the ranks send are no overflow.
  const float big = compression() == Compression::kFloat16 ? 40000.0f : 3.4e38f;
  std::vector<std::vector<float>> data(static_cast<std::size_t>(size()), std::vector<float>(64, 1.0f));
  for (auto& mine : data) {
    mine[5] = big;
    mine[9] = std::numeric_limits<float>::infinity();
    mine[17] = std::numeric_limits<float>::quiet_NaN();
  }
  const CompressedRing ring = run_compressed_ring(data, compression());
  const int flagged = ring.overflowed[0];
  EXPECT_GE(flagged, 0);
  EXPECT_LT(flagged, size());
  for (int r = 0; r < size(); ++r) {
    EXPECT_EQ(ring.overflowed[static_cast<std::size_t>(r)], flagged) << "rank " << r;
    EXPECT_TRUE(std::isinf(ring.results[static_cast<std::size_t>(r)][9])) << "rank " << r;
    EXPECT_TRUE(std::isnan(ring.results[static_cast<std::size_t>(r)][17])) << "rank " << r;
    EXPECT_EQ(ring.results[static_cast<std::size_t>(r)][0], static_cast<float>(size())) << "rank " << r;
  }

  std::vector<std::vector<float>> special(static_cast<std::size_t>(size()), std::vector<float>(64, 1.0f));
  for (auto& mine : special) mine[9] = std::numeric_limits<float>::infinity();
  const CompressedRing quiet = run_compressed_ring(special, compression());
  for (int r = 0; r < size(); ++r) EXPECT_EQ(quiet.overflowed[static_cast<std::size_t>(r)], -1) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CompressedRingAllReduce,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8),
                                            ::testing::Values(Compression::kBfloat16, Compression::kFloat16)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Compression>>& p) {
                           return std::to_string(std::get<0>(p.param)) + "ranks" +
                                  compression_name(std::get<1>(p.param));
                         });

}  // namespace
}  // namespace distribute::cluster
