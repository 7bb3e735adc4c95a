// distribute::collective: the 16-bit wire formats of CommunicationOptions::compression. A float32
// value goes on the wire as bfloat16 or float16, rounded to nearest even, and what arrives is
// widened back to float32 (exactly: every 16-bit value is a float32 value) to be added there. The
// loops are branch-free so that the compiler vectorises them; telling a finite value that becomes
// inf apart costs one max per value.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"
#include "distribute/collective/communication_options.h"
#include "distribute/errors.h"

namespace distribute::collective {

// The bits of one 16-bit value on the wire.
using Wire16 = std::uint16_t;

// out[k] = `in[k]` rounded to `compression`'s format, for k < count. Returns whether a finite
// value was too large for it (it is inf in out); infs and NaNs of `in` stay infs and NaNs.
// `compression` is kBfloat16 or kFloat16.
bool narrow(Compression compression, const float* in, Wire16* out, std::int64_t count);

// out[k] = in[k] as float32.
void widen(Compression compression, const Wire16* in, float* out, std::int64_t count);

// sum[k] += in[k] as float32.
void widen_add(Compression compression, const Wire16* in, float* sum, std::int64_t count);

// The largest finite value of `compression`'s format, for messages.
double largest_finite(Compression compression);

// The error of a compressed sum `what` ("all_reduce #7") that overflowed the format: a value on
// `where` ("worker 1 on host0 (replicas 2, 3)", "replica 1") or its sum with the `others`' values
// ("workers'", "replicas'") was out of its range.
InvalidArgumentError overflow_error(absl::string_view what, Compression compression, absl::string_view where,
                                    absl::string_view others);

}  // namespace distribute::collective
