// The 16-bit wire formats: rounding float32 to bfloat16 or float16 and widening back, on the bits.
#include "collective/compression.h"

#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"

namespace distribute::collective {

namespace {

constexpr std::uint32_t kAbsMask = 0x7fffffffu;
constexpr std::uint32_t kFloatInf = 0x7f800000u;
// From these float32 magnitudes up, the midpoints between each format's largest finite value and
// the next power of 2, a value rounds to inf: 65520 for float16.
constexpr std::uint32_t kFloat16Overflow = 0x477ff000u;
constexpr std::uint32_t kBfloat16Overflow = 0x7f7f8000u;

// bfloat16 is float32's upper half: round the lower half away, to nearest even. A NaN keeps its
// sign and becomes quiet, so that rounding never turns it into an inf.
inline Wire16 to_bfloat16(std::uint32_t bits) {
  const std::uint32_t magnitude = bits & kAbsMask;
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (bits >> 16) | 0x0040u;
  return static_cast<Wire16>(magnitude > kFloatInf ? nan : rounded);
}

// float16: 5 exponent bits (bias 15) and 10 mantissa bits. Normal results drop 13 mantissa bits
// with round to nearest even after the exponent is rebiased (127 - 15 = 112); below 2^-14 the
// result is subnormal, a multiple of 2^-24, which adding 0.5f rounds to (0.5f's last mantissa bit
// is worth 2^-24).
inline Wire16 to_float16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & kAbsMask;
  const std::uint32_t normal = (magnitude - (112u << 23) + 0x0fffu + ((magnitude >> 13) & 1u)) >> 13;
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(std::bit_cast<float>(magnitude) + 0.5f) - 0x3f000000u;
  std::uint32_t out = magnitude < 0x38800000u ? subnormal : normal;
  out = magnitude >= kFloat16Overflow ? 0x7c00u : out;
  out = magnitude > kFloatInf ? 0x7e00u : out;
  return static_cast<Wire16>(sign | out);
}

inline float from_bfloat16(Wire16 half) { return std::bit_cast<float>(static_cast<std::uint32_t>(half) << 16); }

inline float from_float16(Wire16 half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t magnitude = half & 0x7fffu;
  const std::uint32_t exponent = half & 0x7c00u;
  const std::uint32_t normal = (magnitude << 13) + (112u << 23);
  const std::uint32_t special = (magnitude << 13) | kFloatInf;
  // m * 2^-24 for a subnormal m: 0.5f with m in its last bits, less 0.5f, exactly.
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(std::bit_cast<float>(0x3f000000u | magnitude) - 0.5f);
  std::uint32_t out = exponent == 0 ? subnormal : normal;
  out = exponent == 0x7c00u ? special : out;
  return std::bit_cast<float>(sign | out);
}

}  // namespace

// Each loop also gets an AVX2 version, chosen when the program loads where the CPU has it (the
// build targets the baseline x86-64): 8 values per instruction instead of 4. Not under
// ThreadSanitizer, which instruments the choosing function, and that runs before its runtime is up.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define DISTRIBUTE_WITH_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define DISTRIBUTE_WITH_AVX2_CLONE
#endif

DISTRIBUTE_WITH_AVX2_CLONE
bool narrow(Compression compression, const float* in, Wire16* out, std::int64_t count) {
  // The largest magnitude, as float32 bits, is a max reduction the vectoriser takes: one
  // instruction per vector of values. Only where it reaches the format's overflow threshold (an
  // overflow, or an inf or NaN in the values) does a second pass tell finite values apart.
  const std::uint32_t threshold = compression == Compression::kFloat16 ? kFloat16Overflow : kBfloat16Overflow;
  std::uint32_t largest = 0;
  if (compression == Compression::kFloat16) {
    for (std::int64_t k = 0; k < count; ++k) {
      out[k] = to_float16(in[k]);
      largest = std::max(largest, std::bit_cast<std::uint32_t>(in[k]) & kAbsMask);
    }
  } else {
    for (std::int64_t k = 0; k < count; ++k) {
      out[k] = to_bfloat16(std::bit_cast<std::uint32_t>(in[k]));
      largest = std::max(largest, std::bit_cast<std::uint32_t>(in[k]) & kAbsMask);
    }
  }
  if (largest < threshold) return false;
  for (std::int64_t k = 0; k < count; ++k) {
    const std::uint32_t magnitude = std::bit_cast<std::uint32_t>(in[k]) & kAbsMask;
    if (magnitude >= threshold && magnitude < kFloatInf) return true;
  }
  return false;
}

DISTRIBUTE_WITH_AVX2_CLONE
void widen(Compression compression, const Wire16* in, float* out, std::int64_t count) {
  if (compression == Compression::kFloat16) {
    for (std::int64_t k = 0; k < count; ++k) out[k] = from_float16(in[k]);
  } else {
    for (std::int64_t k = 0; k < count; ++k) out[k] = from_bfloat16(in[k]);
  }
}

DISTRIBUTE_WITH_AVX2_CLONE
void widen_add(Compression compression, const Wire16* in, float* sum, std::int64_t count) {
  if (compression == Compression::kFloat16) {
    for (std::int64_t k = 0; k < count; ++k) sum[k] += from_float16(in[k]);
  } else {
    for (std::int64_t k = 0; k < count; ++k) sum[k] += from_bfloat16(in[k]);
  }
}

double largest_finite(Compression compression) {
  return compression == Compression::kFloat16 ? 65504.0 : 3.3895313892515355e38;
}

InvalidArgumentError overflow_error(absl::string_view what, Compression compression, absl::string_view where,
                                    absl::string_view others) {
  return InvalidArgumentError(absl::StrCat(
      what, ": with CommunicationOptions::compression ", compression_name(compression), ", a value on ", where,
      " (or its sum with other ", others, " values) is larger than ", largest_finite(compression),
      ", the largest finite value of the format; the result would hold inf. ",
      compression == Compression::kFloat16
          ? "Scale the values down (a loss scale), or use Compression::kBfloat16, whose range is float32's"
          : "Scale the values down"));
}

}  // namespace distribute::collective
