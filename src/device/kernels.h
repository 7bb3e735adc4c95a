// The arithmetic of host collectives, one function per job, shared by the CPU communicator
// (all_reduce, all_gather) and the cross-replica operations (reduce_to, Strategy::reduce, gather).
// Explicitly instantiated per dtype in src/device/kernels.cc; vectorised through Eigen, with
// float accumulation for float16 and bfloat16 so each result is rounded once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "distribute/device/reduce_op.h"
#include "distribute/device/dtype.h"

namespace distribute::detail {

// out[k] = inputs[0][k] + ... + inputs[n-1][k] for k < count, added left to right (float results
// are the same bit for bit however the engine splits the work); with kMean divided by
// mean_denominator. `out` may alias inputs[0].
void reduce_buffers(DType dtype, ReduceOp op, std::span<const void* const> inputs, void* out,
                    std::int64_t count, std::int64_t mean_denominator);

// dst[k] = src[k] for k < nbytes with stores that bypass the caches (non-temporal), for outputs
// that will not be read before much other memory is touched. Becomes visible to other threads
// only after stream_fence() on the writing thread.
void stream_copy(void* dst, const void* src, std::size_t nbytes);
void stream_fence();

// Views input i as [outer, dims[i] * inner_bytes] bytes and writes their concatenation along the
// middle dimension to out, which holds outer * sum(dims) * inner_bytes bytes. A null input leaves
// its place in out as it is (an all_gather in place skips the replica's own part).
void concat_buffers(std::span<const void* const> inputs, std::span<const std::int64_t> dims,
                    std::int64_t outer, std::size_t inner_bytes, void* out);

// Views in as [outer, dim, inner] elements and writes the sums over dim, [outer, inner], to out.
void sum_over_axis(DType dtype, const void* in, std::int64_t outer, std::int64_t dim,
                   std::int64_t inner, void* out);

}  // namespace distribute::detail
