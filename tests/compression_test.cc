// The 16-bit wire formats of CommunicationOptions::compression (src/collective/compression.h)
// against Eigen's half and bfloat16, which round to nearest even: every 16-bit value widens
// exactly, float32 values across the whole range (normal, subnormal, the edges of float16's range,
// infs and NaNs) narrow to the same bits, and only finite values that become inf count as overflow.
// Then the option in one process, where nothing crosses a link (multi_worker_test_compression takes
// it across workers; errors_test its misuse, row E124).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "collective/compression.h"
#include "distribute/distribute.h"
#include "testing/error_expect.h"

namespace distribute::collective {
namespace {

Wire16 reference(Compression compression, float value) {
  if (compression == Compression::kFloat16) return std::bit_cast<Wire16>(Half(value));
  return std::bit_cast<Wire16>(BFloat16(value));
}

float reference_wide(Compression compression, Wire16 bits) {
  if (compression == Compression::kFloat16) return static_cast<float>(std::bit_cast<Half>(bits));
  return static_cast<float>(std::bit_cast<BFloat16>(bits));
}

bool is_nan16(Compression compression, Wire16 bits) {
  return compression == Compression::kFloat16 ? (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0
                                              : (bits & 0x7f80) == 0x7f80 && (bits & 0x7f) != 0;
}

class WireFormat : public ::testing::TestWithParam<Compression> {};

TEST_P(WireFormat, EverySixteenBitValueWidensExactly) {
  std::vector<Wire16> all(65536);
  for (std::uint32_t k = 0; k < all.size(); ++k) all[k] = static_cast<Wire16>(k);
  std::vector<float> wide(all.size());
  std::vector<float> sums(all.size(), 1.0f);
  widen(GetParam(), all.data(), wide.data(), static_cast<std::int64_t>(all.size()));
  widen_add(GetParam(), all.data(), sums.data(), static_cast<std::int64_t>(all.size()));
  for (std::uint32_t k = 0; k < all.size(); ++k) {
    const float expected = reference_wide(GetParam(), all[k]);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(wide[k])) << std::hex << k;
      continue;
    }
    ASSERT_EQ(std::bit_cast<std::uint32_t>(wide[k]), std::bit_cast<std::uint32_t>(expected)) << std::hex << k;
    ASSERT_EQ(sums[k], 1.0f + expected) << std::hex << k;
  }
}

TEST_P(WireFormat, NarrowsToNearestEvenAcrossTheRange) {
  // Every 4099th float32 bit pattern, both signs, and the edges of each format.
  std::vector<float> values;
  for (std::uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  for (const float edge : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 3.38953139e38f,
                           std::bit_cast<float>(0x7f7f8000u), std::bit_cast<float>(0x7f7f7fffu), std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 0.0f}) {
    values.push_back(edge);
    values.push_back(-edge);
  }
  std::vector<Wire16> narrow_bits(values.size());
  narrow(GetParam(), values.data(), narrow_bits.data(), static_cast<std::int64_t>(values.size()));
  for (std::size_t k = 0; k < values.size(); ++k) {
    const Wire16 expected = reference(GetParam(), values[k]);
    if (std::isnan(values[k])) {
      ASSERT_TRUE(is_nan16(GetParam(), narrow_bits[k])) << values[k];
      ASSERT_EQ(narrow_bits[k] & 0x8000, expected & 0x8000) << "the sign of a NaN";
      continue;
    }
    ASSERT_EQ(narrow_bits[k], expected) << std::hexfloat << values[k];
  }
}

TEST_P(WireFormat, OverflowIsAFiniteValueThatBecameInf) {
  const float largest = static_cast<float>(largest_finite(GetParam()));
  // The midpoints between each format's largest and the next power of 2, which round to inf.
  const float too_large = GetParam() == Compression::kFloat16 ? 65520.0f : std::bit_cast<float>(0x7f7f8000u);
  Wire16 out[4];
  const auto overflows = [&](std::vector<float> in) {
    return narrow(GetParam(), in.data(), out, static_cast<std::int64_t>(in.size()));
  };
  EXPECT_FALSE(overflows({largest, -largest, 1.0f}));
  EXPECT_TRUE(overflows({1.0f, too_large}));
  EXPECT_TRUE(overflows({-too_large}));
  EXPECT_FALSE(overflows({std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}));
}

INSTANTIATE_TEST_SUITE_P(Formats, WireFormat, ::testing::Values(Compression::kBfloat16, Compression::kFloat16),
                         [](const ::testing::TestParamInfo<Compression>& p) { return compression_name(p.param); });

MirroredStrategy two_cpus(CommunicationOptions defaults = {}) {
  return MirroredStrategy({"CPU:0", "CPU:1"}, MirroredStrategyOptions{.communication = defaults});
}

TEST(Compression, ParsedFromItsNames) {
  EXPECT_EQ(parse_compression("none"), Compression::kNone);
  EXPECT_EQ(parse_compression("BF16"), Compression::kBfloat16);
  EXPECT_EQ(parse_compression("fp16"), Compression::kFloat16);
  testing::expect_error<InvalidArgumentError>([] { parse_compression("float16"); },
                                              {"unknown compression 'float16'; use none, bf16 or fp16"});
}

TEST(CompressionInOneProcess, SumsAreFloat32sExactly) {
  MirroredStrategy strategy = two_cpus();
  // 40000 + 40000 overflows float16, 1 + 2^-20 is lost in bfloat16: neither crosses a link here.
  for (const Compression c : {Compression::kFloat16, Compression::kBfloat16}) {
    const auto sums = strategy.run([c] {
      return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::from_vector<float>({40000.0f, 0.5f + 0x1p-20f}),
                                               CommunicationOptions{.compression = c});
    });
    EXPECT_EQ(sums[1].to_vector<float>(), (std::vector<float>{80000.0f, 1.0f + 0x1p-19f})) << compression_name(c);
  }
}

TEST(CompressionInOneProcess, AStrategysDefaultLeavesTheOtherCollectivesAlone) {
  MirroredStrategy strategy = two_cpus({.compression = Compression::kBfloat16});
  const auto results = strategy.run([] {
    ReplicaContext& ctx = *get_replica_context();
    const Tensor mine = Tensor::from_vector<float>({static_cast<float>(ctx.replica_id_in_sync_group())});
    return std::make_pair(ctx.all_reduce(ReduceOp::kSum, mine), ctx.all_gather(mine, 0));
  });
  EXPECT_EQ(results[0].first.to_vector<float>(), std::vector<float>{1.0f});
  EXPECT_EQ(results[0].second.to_vector<float>(), (std::vector<float>{0.0f, 1.0f}));
}

TEST(CompressionInOneProcess, ReplicasPassingOtherCompressionsAreNamed) {
  MirroredStrategy strategy = two_cpus();
  testing::expect_error<InvalidArgumentError>(
      [&] {
        strategy.run([] {
          ReplicaContext& ctx = *get_replica_context();
          const Compression c = ctx.replica_id_in_sync_group() == 1 ? Compression::kFloat16 : Compression::kNone;
          ctx.all_reduce(ReduceOp::kSum, 1.0f, CommunicationOptions{.compression = c});
        });
      },
      {"all_reduce #1: replica 1 passed options {implementation=AUTO, bytes_per_pack=0, compression=FP16}, "
       "replica 0 passed options {implementation=AUTO, bytes_per_pack=0}"});
}

}  // namespace
}  // namespace distribute::collective
