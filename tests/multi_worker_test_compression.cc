// CommunicationOptions::compression across workers: float32 values cross the ring between the
// workers in 16 bits. Within the bound of docs/overlap.md of the float32 sum, the same bits on every
// replica of every worker, half the bytes on the wire (collective_stats), and an overflow of
// float16 an InvalidArgumentError on every worker that leaves the strategy usable. In one worker
// nothing crosses a link: the sums are float32's, exactly. On GPUs (--device=gpu) NCCL joins every
// replica, and every NCCL rank's values cross: the bound counts the ranks; collective_stats counts
// no bytes there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "multi_worker_test.h"
#include "testing/error_expect.h"

namespace distribute {
namespace {

using testing::MultiWorker;

bool on_gpus() { return testing::g_device_type == "GPU:"; }

// The number of parties whose values cross a link in 16 bits: the workers (each adds its own
// replicas in float32 first), or on GPUs every NCCL rank.
int compressing_parties(int workers, int replicas) { return on_gpus() ? replicas : workers; }

// Replica g's value of element i: magnitudes from 1e-6 to 1e3.
float value(int g, std::int64_t i) {
  return std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(g) * 1.3f) *
         std::ldexp(1.0f, static_cast<int>((i * 7 + g) % 30) - 20);
}

class MultiWorkerCompression : public MultiWorker, public ::testing::WithParamInterface<Compression> {};

TEST_P(MultiWorkerCompression, WithinTheBoundWithTheSameBitsAndHalfTheBytes) {
  const Compression compression = GetParam();
  // 100000 values take the ring in pieces of every size; 7 the smallest parts.
  const std::vector<std::int64_t> counts{100000, 7};
  const auto step = [&](Compression c) {
    return s.run([&, c] {
      ReplicaContext& ctx = *get_replica_context();
      const int g = ctx.replica_id_in_sync_group();
      std::vector<Tensor> values;
      for (const std::int64_t count : counts) {
        std::vector<float> v(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = value(g, i);
        values.push_back(Tensor::from_vector<float>(v));
      }
      std::vector<Tensor> sums = ctx.all_reduce(ReduceOp::kSum, values, CommunicationOptions{.compression = c});
      // Every replica's result, gathered unchanged, to compare the bits.
      return std::make_pair(sums, ctx.all_gather(sums, 0));
    });
  };
  s.extended().reset_collective_stats();
  step(Compression::kNone);
  const std::int64_t float32_bytes = s.extended().collective_stats().cross_worker_bytes;
  s.extended().reset_collective_stats();
  const auto results = step(compression);
  const CollectiveStats stats = s.extended().collective_stats();
  if (workers() == 1 || on_gpus()) {
    EXPECT_EQ(stats.cross_worker_bytes, 0);
  } else {
    // The all_gather's bytes (each leaf with its size, 8 bytes) are the same in both; the
    // all_reduce's halve.
    const std::int64_t gather_bytes = 100007 * 4 * local() + 2 * 8;
    EXPECT_EQ(float32_bytes - gather_bytes, 2 * (stats.cross_worker_bytes - gather_bytes))
        << "float32 " << float32_bytes << " B, compressed " << stats.cross_worker_bytes << " B";
  }
  const double u = compression == Compression::kFloat16 ? 0x1p-11 : 0x1p-8;
  const double floor = compression == Compression::kFloat16 ? 0x1p-25 : 0x1p-134;
  const int parties = compressing_parties(workers(), n());
  const double w = parties;
  const std::vector<Tensor> mine = results[0].first;
  for (std::size_t leaf = 0; leaf < counts.size(); ++leaf) {
    const std::vector<float> got = mine[leaf].to_vector<float>();
    for (const auto& [sums, gathered] : results.values()) {
      const std::vector<float> all = gathered[leaf].to_vector<float>();
      for (int r = 0; r < n(); ++r) {
        ASSERT_EQ(std::memcmp(all.data() + static_cast<std::size_t>(r) * got.size(), got.data(), got.size() * sizeof(float)),
                  0)
            << "replica " << r << " has other bits in leaf " << leaf;
      }
    }
    for (std::int64_t i = 0; i < counts[leaf]; ++i) {
      double sum = 0;
      double magnitude = 0;
      for (int g = 0; g < n(); ++g) {
        sum += value(g, i);
        magnitude += std::abs(value(g, i));
      }
      // Each worker's float32 sum of its replicas, then the ring's w roundings to 16 bits.
      const double bound = (local() * 0x1p-24 + w * (u + 0x1p-24) * (1 + w * u)) * magnitude + w * floor;
      const double error = std::abs(got[static_cast<std::size_t>(i)] - sum);
      if (parties == 1) {
        ASSERT_LE(error, local() * 0x1p-24 * magnitude) << "element " << i << " of leaf " << leaf;
      } else {
        ASSERT_LE(error, bound) << "element " << i << " of leaf " << leaf;
      }
    }
  }
}

TEST_P(MultiWorkerCompression, AReducedScatterSumsAsTheAllReduceDoes) {
  const Compression compression = GetParam();
  const auto results = s.run([&] {
    ReplicaContext& ctx = *get_replica_context();
    std::vector<float> v(40000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(ctx.replica_id_in_sync_group(), static_cast<std::int64_t>(i));
    const CommunicationOptions options{.compression = compression};
    const Tensor whole = ctx.all_reduce(ReduceOp::kMean, Tensor::from_vector<float>(v), options);
    const Tensor shard = ctx.reduce_scatter(ReduceOp::kMean, Tensor::from_vector<float>(v), options);
    return std::make_pair(whole, shard);
  });
  // Each replica's shard is its part of the all_reduce, the same bits.
  int replica = s.extended().worker_id() * local();
  for (const auto& [whole, shard] : results.values()) {
    const Shard part = shard_of(40000, n(), replica++);
    const std::vector<float> w = whole.to_vector<float>();
    const std::vector<float> got = shard.to_vector<float>();
    ASSERT_EQ(got.size(), static_cast<std::size_t>(part.size));
    EXPECT_EQ(std::memcmp(got.data(), w.data() + part.begin, got.size() * sizeof(float)), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, MultiWorkerCompression, ::testing::Values(Compression::kBfloat16, Compression::kFloat16),
                         [](const ::testing::TestParamInfo<Compression>& p) { return compression_name(p.param); });

TEST_F(MultiWorker, CompressionOverflowingFloat16IsAnErrorOnEveryWorker) {
  // 40000 fits float16; a sum of two does not.
  const auto sum_big = [&] {
    return s.run([] {
      return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::from_vector<float>({1.0f, 40000.0f, 2.0f}),
                                               CommunicationOptions{.compression = Compression::kFloat16});
    });
  };
  if (compressing_parties(workers(), n()) == 1) {
    // Inside one process nothing is narrowed.
    EXPECT_EQ(sum_big()[0].to_vector<float>(),
              (std::vector<float>{static_cast<float>(n()), 40000.0f * static_cast<float>(n()), 2.0f * static_cast<float>(n())}));
    return;
  }
  testing::expect_error<InvalidArgumentError>(
      sum_big, {"all_reduce #1: with CommunicationOptions::compression FP16, a value on worker",
                "is larger than 65504, the largest finite value of the format; the result would hold inf",
                "use Compression::kBfloat16"});
  expect_still_usable();
}

}  // namespace
}  // namespace distribute
