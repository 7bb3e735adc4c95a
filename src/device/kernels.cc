// Host kernels: reductions (Eigen, left to right), streaming copies, concatenation, sums over an axis.
#include "device/kernels.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include <Eigen/Core>

#include "base/multiversion.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace distribute::detail {
namespace {

template <class T>
using Accumulator = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <class T>
using ConstVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

// The sums of the common types are plain loops compiled for AVX2 too (base/multiversion.h).

// One pass takes up to four inputs: a replica's share is then read and written once for four
// replicas instead of three times, and a gradient list of small tensors makes one call per
// tensor. Each element is still summed in input order, so the result does not depend on how the
// inputs are grouped into passes.
constexpr std::size_t kInputsPerPass = 4;

// out[i] = ((first[i] + rest[0][i]) + rest[1][i]) + ...
template <class T, class... Rest>
DISTRIBUTE_MULTIVERSION void sum_to(T* __restrict out, std::int64_t n, const T* __restrict first,
                                    const Rest* __restrict... rest) {
  for (std::int64_t i = 0; i < n; ++i) {
    T s = first[i];
    ((s += rest[i]), ...);
    out[i] = s;
  }
}

// out[i] = ((out[i] + rest[0][i]) + rest[1][i]) + ...
template <class T, class... Rest>
DISTRIBUTE_MULTIVERSION void sum_into(T* __restrict out, std::int64_t n, const Rest* __restrict... rest) {
  for (std::int64_t i = 0; i < n; ++i) {
    T s = out[i];
    ((s += rest[i]), ...);
    out[i] = s;
  }
}

// Sums inputs[0..size) into out (which may be inputs[0]) in passes of up to kInputsPerPass inputs.
template <class T>
void sum_inputs(std::span<const void* const> inputs, T* out, std::int64_t n) {
  const auto in = [&](std::size_t i) { return static_cast<const T*>(inputs[i]); };
  std::size_t next = 1;
  if (out != inputs[0]) {
    next = std::min(inputs.size(), kInputsPerPass);
    switch (next) {
      case 2: sum_to<T>(out, n, in(0), in(1)); break;
      case 3: sum_to<T>(out, n, in(0), in(1), in(2)); break;
      default: sum_to<T>(out, n, in(0), in(1), in(2), in(3)); break;
    }
  }
  while (next < inputs.size()) {
    const std::size_t pass = std::min(inputs.size() - next, kInputsPerPass - 1);
    switch (pass) {
      case 1: sum_into<T>(out, n, in(next)); break;
      case 2: sum_into<T>(out, n, in(next), in(next + 1)); break;
      default: sum_into<T>(out, n, in(next), in(next + 1), in(next + 2)); break;
    }
    next += pass;
  }
}

template <class T>
void reduce_typed(ReduceOp op, std::span<const void* const> inputs, void* out_data, std::int64_t count,
                  std::int64_t denominator) {
  const auto in = [&](std::size_t i, std::int64_t offset, std::int64_t n) {
    return ConstVec<T>(static_cast<const T*>(inputs[i]) + offset, n);
  };
  const bool mean = op == ReduceOp::kMean;
  if constexpr (std::is_same_v<Accumulator<T>, T>) {
    Vec<T> out(static_cast<T*>(out_data), count);
    if (inputs.size() == 1) {
      if (out.data() != inputs[0]) out = in(0, 0, count);
    } else {
      sum_inputs<T>(inputs, out.data(), count);
    }
    if (mean && denominator != 1) out /= static_cast<T>(denominator);
  } else {
    constexpr std::int64_t kBlock = 1024;
    std::array<float, kBlock> acc_storage;
    for (std::int64_t offset = 0; offset < count; offset += kBlock) {
      const std::int64_t n = std::min(kBlock, count - offset);
      Eigen::Map<Eigen::ArrayXf> acc(acc_storage.data(), n);
      acc = in(0, offset, n).template cast<float>();
      for (std::size_t i = 1; i < inputs.size(); ++i) acc += in(i, offset, n).template cast<float>();
      if (mean) acc /= static_cast<float>(denominator);
      Vec<T>(static_cast<T*>(out_data) + offset, n) = acc.template cast<T>();
    }
  }
}

template <class T>
void sum_over_axis_typed(const void* in_data, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                         void* out_data) {
  using Acc = Accumulator<T>;
  const T* in = static_cast<const T*>(in_data);
  T* out = static_cast<T*>(out_data);
  Eigen::Array<Acc, Eigen::Dynamic, 1> acc(inner);
  for (std::int64_t o = 0; o < outer; ++o) {
    acc.setZero();
    for (std::int64_t d = 0; d < dim; ++d) {
      acc += ConstVec<T>(in + (o * dim + d) * inner, inner).template cast<Acc>();
    }
    Vec<T>(out + o * inner, inner) = acc.template cast<T>();
  }
}

}  // namespace

void reduce_buffers(DType dtype, ReduceOp op, std::span<const void* const> inputs, void* out,
                    std::int64_t count, std::int64_t mean_denominator) {
  if (count == 0 || inputs.empty()) return;
  dispatch_dtype(dtype, [&]<class T>(TypeTag<T>) {
    reduce_typed<T>(op, inputs, out, count, mean_denominator);
  });
}

void stream_copy(void* dst, const void* src, std::size_t nbytes) {
#if defined(__SSE2__)
  // Plain copies up to the destination's first 16-byte boundary and after its last; streaming
  // stores in between (unaligned loads are as fast as aligned ones when the source is aligned).
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  const std::size_t head = std::min(nbytes, (16 - reinterpret_cast<std::uintptr_t>(out) % 16) % 16);
  std::memcpy(out, in, head);
  std::size_t i = head;
  for (; i + 64 <= nbytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i + 48), d);
  }
  for (; i + 16 <= nbytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
  }
  std::memcpy(out + i, in + i, nbytes - i);
#else
  std::memcpy(dst, src, nbytes);
#endif
}

void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

void concat_buffers(std::span<const void* const> inputs, std::span<const std::int64_t> dims,
                    std::int64_t outer, std::size_t inner_bytes, void* out) {
  std::int64_t total = 0;
  for (std::int64_t d : dims) total += d;
  const std::size_t out_row = static_cast<std::size_t>(total) * inner_bytes;
  std::size_t column = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::size_t row = static_cast<std::size_t>(dims[i]) * inner_bytes;
    if (row != 0 && inputs[i] != nullptr) {
      const char* src = static_cast<const char*>(inputs[i]);
      char* dst = static_cast<char*>(out) + column;
      if (outer == 1) {
        std::memcpy(dst, src, row);
      } else {
        for (std::int64_t o = 0; o < outer; ++o) {
          std::memcpy(dst + static_cast<std::size_t>(o) * out_row, src + static_cast<std::size_t>(o) * row, row);
        }
      }
    }
    column += row;
  }
}

void sum_over_axis(DType dtype, const void* in, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                   void* out) {
  dispatch_dtype(dtype, [&]<class T>(TypeTag<T>) { sum_over_axis_typed<T>(in, outer, dim, inner, out); });
}

}  // namespace distribute::detail
