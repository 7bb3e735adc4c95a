// The MLP's passes on a GPU: the replica's own weights read in place, the matrix products by cuBLAS
// and the rest by gpu_kernels.cu, all on the replica's CUDA stream (distribute::cuda::current_stream),
// where the strategy's all_reduce and the optimizer's step follow them.
#include "model_gpu.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu_kernels.h"
#include "idx.h"

namespace fashion_mnist {

using distribute::DType;
using distribute::Shape;
using distribute::Tensor;

// A replica's cuBLAS handle and device buffers, kept in its Workspace across steps.
struct GpuPasses {
  GpuPasses() {
    if (cublasStatus_t status = cublasCreate(&handle); status != CUBLAS_STATUS_SUCCESS) {
      throw distribute::InternalError(absl::StrCat("cublasCreate failed: ", cublasGetStatusString(status)));
    }
  }
  ~GpuPasses() { cublasDestroy(handle); }
  GpuPasses(const GpuPasses&) = delete;
  GpuPasses& operator=(const GpuPasses&) = delete;

  // Buffers for a batch of `n` rows of `model`, the one model its workspace serves.
  void resize(const Mlp& model, std::int64_t n) {
    if (n == rows) return;
    rows = n;
    const auto layers = static_cast<std::size_t>(model.layers());
    outputs.resize(layers);
    deltas.resize(layers);
    activations.resize(layers - 1);
    for (std::size_t l = 0; l < layers; ++l) {
      outputs[l] = Tensor::empty(DType::kFloat32, Shape{n, model.widths[l + 1]});
      deltas[l] = Tensor::empty(DType::kFloat32, Shape{n, model.widths[l + 1]});
      if (l + 1 < layers) activations[l] = Tensor::empty(DType::kFloat32, Shape{n, model.widths[l + 1]});
    }
    loss = Tensor::empty(DType::kFloat32, Shape{n});
  }

  cublasHandle_t handle = nullptr;
  std::int64_t rows = -1;
  std::vector<Tensor> outputs;
  std::vector<Tensor> deltas;
  std::vector<Tensor> activations;
  Tensor loss;
  Tensor correct;  // one int64 counter
};

namespace {

float* floats(Tensor& t) { return static_cast<float*>(t.raw_data()); }
const float* floats(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }
const std::int32_t* ints(const Tensor& t) { return static_cast<const std::int32_t*>(t.raw_data()); }

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) throw distribute::InternalError(absl::StrCat(what, " failed: ", cudaGetErrorString(error)));
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw distribute::InternalError(absl::StrCat(what, " failed: ", cublasGetStatusString(status)));
  }
}

GpuPasses& passes_for(Workspace& workspace) {
  if (!workspace.gpu) workspace.gpu = std::make_shared<GpuPasses>();
  check(cublasSetStream(workspace.gpu->handle, distribute::cuda::current_stream()), "cublasSetStream");
  return *workspace.gpu;
}

// c [m, n] = op(a) [m, k] * op(b) [k, n], row-major; a is stored [k, m] when ta, b is [n, k] when
// tb. cuBLAS is column-major and sees each row-major matrix as its transpose, so it computes
// c^T = op(b)^T op(a)^T.
void gemm(cublasHandle_t handle, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
          const float* b, float* c) {
  if (m == 0 || n == 0) return;
  const float one = 1.0f;
  const float zero = 0.0f;
  check(cublasSgemm(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                    static_cast<int>(m), static_cast<int>(k), &one, b, static_cast<int>(tb ? k : n), a,
                    static_cast<int>(ta ? m : k), &zero, c, static_cast<int>(n)),
        "cublasSgemm");
}

// The layers on `images` [n, 784]; afterwards passes.outputs.back() holds the logits.
void forward(const Mlp& model, const Tensor& images, std::int64_t n, GpuPasses& passes) {
  const cudaStream_t stream = distribute::cuda::current_stream();
  const std::vector<std::int64_t>& widths = model.widths;
  for (int l = 0; l < model.layers(); ++l) {
    const Tensor kernel = model.kernels[l].value();
    const Tensor bias = model.biases[l].value();
    const float* in = l == 0 ? floats(images) : floats(passes.activations[l - 1]);
    gemm(passes.handle, false, false, n, widths[l + 1], widths[l], in, floats(kernel), floats(passes.outputs[l]));
    check(gpu::add_bias_relu(floats(passes.outputs[l]), floats(bias),
                             l + 1 < model.layers() ? floats(passes.activations[l]) : nullptr, n,
                             static_cast<int>(widths[l + 1]), stream),
          "the bias and ReLU kernel");
  }
}

}  // namespace

Tensor forward_backward_on_gpu(const Mlp& model, const Tensor& images, const Tensor& labels,
                               std::int64_t global_batch_size, Workspace& workspace, const GradientSink& on_gradient) {
  GpuPasses& passes = passes_for(workspace);
  const cudaStream_t stream = distribute::cuda::current_stream();
  const std::int64_t n = labels.num_elements();
  const std::vector<std::int64_t>& widths = model.widths;
  passes.resize(model, n);
  forward(model, images, n, passes);
  check(gpu::softmax_cross_entropy(floats(passes.outputs.back()), ints(labels), n, kClasses,
                                   1.0f / static_cast<float>(global_batch_size), floats(passes.loss),
                                   floats(passes.deltas.back()), stream),
        "the softmax cross-entropy kernel");

  if (workspace.gradients.empty()) {
    for (const distribute::Variable& v : model.trainable_variables()) {
      workspace.gradients.push_back(Tensor::empty(v.dtype(), v.shape()));
    }
  }
  for (int l = model.layers() - 1; l >= 0; --l) {
    const Tensor& delta = passes.deltas[l];
    Tensor& kernel_gradient = workspace.gradients[static_cast<std::size_t>(2 * l)];
    Tensor& bias_gradient = workspace.gradients[static_cast<std::size_t>(2 * l + 1)];
    const float* in = l == 0 ? floats(images) : floats(passes.activations[l - 1]);
    if (n == 0) {
      check(cudaMemsetAsync(kernel_gradient.raw_data(), 0, kernel_gradient.nbytes(), stream), "cudaMemsetAsync");
    } else {
      gemm(passes.handle, true, false, widths[l], widths[l + 1], n, in, floats(delta), floats(kernel_gradient));
    }
    if (on_gradient) on_gradient(model.kernels[l], kernel_gradient);
    check(gpu::column_sums(floats(delta), n, static_cast<int>(widths[l + 1]), floats(bias_gradient), stream),
          "the column sums kernel");
    if (on_gradient) on_gradient(model.biases[l], bias_gradient);
    if (l > 0) {
      const Tensor kernel = model.kernels[l].value();
      gemm(passes.handle, false, true, n, widths[l], widths[l + 1], floats(delta), floats(kernel),
           floats(passes.deltas[l - 1]));
      check(gpu::relu_gradient(floats(passes.deltas[l - 1]), floats(passes.outputs[l - 1]), n * widths[l], stream),
            "the ReLU gradient kernel");
    }
  }
  return distribute::nn::compute_average_loss(passes.loss, global_batch_size);
}

std::int64_t count_correct_on_gpu(const Mlp& model, const Tensor& images, const Tensor& labels,
                                  Workspace& workspace) {
  GpuPasses& passes = passes_for(workspace);
  const cudaStream_t stream = distribute::cuda::current_stream();
  const std::int64_t n = labels.num_elements();
  passes.resize(model, n);
  forward(model, images, n, passes);
  if (!passes.correct.defined()) passes.correct = Tensor::empty(DType::kInt64, Shape{1});
  check(cudaMemsetAsync(passes.correct.raw_data(), 0, sizeof(std::int64_t), stream), "cudaMemsetAsync");
  check(gpu::count_correct(floats(passes.outputs.back()), ints(labels), n, kClasses,
                           static_cast<unsigned long long*>(passes.correct.raw_data()), stream),
        "the count kernel");
  return passes.correct.to_vector<std::int64_t>()[0];
}

}  // namespace fashion_mnist
