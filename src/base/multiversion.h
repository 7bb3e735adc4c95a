// DISTRIBUTE_MULTIVERSION: compiles a hot loop for AVX2 as well as the baseline and picks one at
// load time. Eigen's packets are fixed at compile time (SSE2 without -march), which halves the
// throughput of element-wise loops that fit in cache; a plain loop marked with this gets both.
// Off under the sanitizers and Clang, whose ifunc support is not what GCC's is.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define DISTRIBUTE_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define DISTRIBUTE_MULTIVERSION
#endif
