// The MLP's GPU kernels; see gpu_kernels.h.
#include "gpu_kernels.h"

namespace fashion_mnist::gpu {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t count) {
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

__device__ std::int64_t first_index() { return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

__global__ void add_bias_relu_kernel(float* out, const float* bias, float* activation, std::int64_t count, int cols) {
  for (std::int64_t k = first_index(); k < count; k += grid_stride()) {
    const float v = out[k] + bias[k % cols];
    out[k] = v;
    if (activation != nullptr) activation[k] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void softmax_cross_entropy_kernel(const float* logits, const std::int32_t* labels, std::int64_t rows,
                                             int cols, float scale, float* loss, float* delta) {
  for (std::int64_t i = first_index(); i < rows; i += grid_stride()) {
    const float* row = logits + i * cols;
    float max = row[0];
    for (int j = 1; j < cols; ++j) max = row[j] > max ? row[j] : max;
    float sum = 0.0f;
    for (int j = 0; j < cols; ++j) sum += expf(row[j] - max);
    const int label = labels[i];
    loss[i] = logf(sum) + max - row[label];
    for (int j = 0; j < cols; ++j) {
      const float p = expf(row[j] - max) / sum;
      delta[i * cols + j] = (p - (j == label ? 1.0f : 0.0f)) * scale;
    }
  }
}

__global__ void column_sums_kernel(const float* m, std::int64_t rows, int cols, float* out) {
  for (std::int64_t j = first_index(); j < cols; j += grid_stride()) {
    float sum = 0.0f;
    for (std::int64_t i = 0; i < rows; ++i) sum += m[i * cols + j];
    out[j] = sum;
  }
}

__global__ void relu_gradient_kernel(float* delta, const float* output, std::int64_t count) {
  for (std::int64_t k = first_index(); k < count; k += grid_stride()) {
    if (output[k] <= 0.0f) delta[k] = 0.0f;
  }
}

__global__ void count_correct_kernel(const float* logits, const std::int32_t* labels, std::int64_t rows, int cols,
                                     unsigned long long* correct) {
  for (std::int64_t i = first_index(); i < rows; i += grid_stride()) {
    const float* row = logits + i * cols;
    int best = 0;
    for (int j = 1; j < cols; ++j) best = row[j] > row[best] ? j : best;
    if (best == labels[i]) atomicAdd(correct, 1ULL);
  }
}

}  // namespace

cudaError_t add_bias_relu(float* out, const float* bias, float* activation, std::int64_t rows, int cols,
                          cudaStream_t stream) {
  const std::int64_t count = rows * cols;
  if (count == 0) return cudaSuccess;
  add_bias_relu_kernel<<<blocks_for(count), kThreads, 0, stream>>>(out, bias, activation, count, cols);
  return cudaGetLastError();
}

cudaError_t softmax_cross_entropy(const float* logits, const std::int32_t* labels, std::int64_t rows, int cols,
                                  float scale, float* loss, float* delta, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  softmax_cross_entropy_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logits, labels, rows, cols, scale, loss,
                                                                          delta);
  return cudaGetLastError();
}

cudaError_t column_sums(const float* m, std::int64_t rows, int cols, float* out, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  column_sums_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(m, rows, cols, out);
  return cudaGetLastError();
}

cudaError_t relu_gradient(float* delta, const float* output, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  relu_gradient_kernel<<<blocks_for(count), kThreads, 0, stream>>>(delta, output, count);
  return cudaGetLastError();
}

cudaError_t count_correct(const float* logits, const std::int32_t* labels, std::int64_t rows, int cols,
                          unsigned long long* correct, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  count_correct_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logits, labels, rows, cols, correct);
  return cudaGetLastError();
}

}  // namespace fashion_mnist::gpu
