// cluster::ring_all_reduce over threads: each rank a thread, its links to the next and previous
// ranks mailboxes in shared memory. Sums are exact, uneven and tiny parts (fewer elements than
// ranks) work, and every rank ends with the same bits, also where the order of additions matters.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
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

// Runs the ring over `size` threads on data[r] (rank r's values) and returns every rank's result.
template <class T>
std::vector<std::vector<T>> run_ring(std::vector<std::vector<T>> data) {
  const int size = static_cast<int>(data.size());
  testing::Watchdog watchdog(std::chrono::seconds(30), "ring all-reduce test");
  Mailboxes boxes(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ThreadLinks links(boxes, r, size);
      std::vector<std::byte> scratch;
      std::vector<T>& mine = data[static_cast<std::size_t>(r)];
      ring_all_reduce(links, dtype_v<T>, reinterpret_cast<std::byte*>(mine.data()),
                      static_cast<std::int64_t>(mine.size()), scratch);
    });
  }
  for (std::thread& t : threads) t.join();
  return data;
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

TEST_P(RingAllReduce, EveryRankHoldsTheSameBits) {
  std::mt19937_64 random(42);
  std::uniform_real_distribution<double> values(-1e6, 1e6);
  std::vector<std::vector<double>> data(static_cast<std::size_t>(size()));
  for (auto& mine : data) {
    for (int i = 0; i < 5000; ++i) mine.push_back(values(random) * (i % 3 == 0 ? 1e-9 : 1.0));
  }
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

INSTANTIATE_TEST_SUITE_P(Ranks, RingAllReduce, ::testing::Values(1, 2, 3, 4, 7),
                         [](const ::testing::TestParamInfo<int>& ranks) { return std::to_string(ranks.param) + "ranks"; });

}  // namespace
}  // namespace distribute::cluster
