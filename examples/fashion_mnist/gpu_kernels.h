// The element-wise and per-row pieces of the MLP's passes on a GPU (the matrix products go to
// cuBLAS in model_gpu.cc). Each enqueues one kernel on `stream` and returns the launch's error.
// Row-major float32 matrices; `rows` may be 0. Compiled by nvcc, so it includes only CUDA.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace fashion_mnist::gpu {

// out[i, j] += bias[j]; then, when `activation` is not null, activation = max(out, 0).
cudaError_t add_bias_relu(float* out, const float* bias, float* activation, std::int64_t rows, int cols,
                          cudaStream_t stream);

// Per row i of `logits` [rows, cols]: loss[i] = log(sum_j exp(l_ij - m_i)) + m_i - l_i,label_i with
// m_i the row's maximum, and delta[i, j] = (softmax_ij - [j == label_i]) * scale.
cudaError_t softmax_cross_entropy(const float* logits, const std::int32_t* labels, std::int64_t rows, int cols,
                                  float scale, float* loss, float* delta, cudaStream_t stream);

// out[j] = sum_i m[i, j].
cudaError_t column_sums(const float* m, std::int64_t rows, int cols, float* out, cudaStream_t stream);

// delta[k] = 0 where output[k] <= 0 (ReLU's gradient).
cudaError_t relu_gradient(float* delta, const float* output, std::int64_t count, cudaStream_t stream);

// *correct += the rows whose highest logit (the first of equal ones) is their label.
cudaError_t count_correct(const float* logits, const std::int32_t* labels, std::int64_t rows, int cols,
                          unsigned long long* correct, cudaStream_t stream);

}  // namespace fashion_mnist::gpu
