// from_torch / to_torch: at::Tensor and Tensor over one storage.
#include "distribute/torch/tensor_interop.h"

#include <ATen/ops/from_blob.h>

#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/check.h"

namespace distribute {
namespace {

std::optional<DType> dtype_of(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    default: return std::nullopt;
  }
}

at::ScalarType scalar_type_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat64: return at::kDouble;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kInt32: return at::kInt;
    case DType::kInt64: return at::kLong;
  }
  throw InternalError(absl::StrCat("to_torch: unknown dtype value ", static_cast<int>(dtype)));
}

template <class T>
std::string printed(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

Tensor from_torch(const at::Tensor& tensor) {
  DISTRIBUTE_CHECK(tensor.defined(), InvalidArgumentError, "from_torch: the LibTorch tensor is undefined");
  DISTRIBUTE_CHECK(tensor.layout() == at::kStrided, InvalidArgumentError, "from_torch: the LibTorch tensor's layout is ",
                   printed(tensor.layout()), "; only dense (strided) tensors share memory: call .to_dense() first");
  DISTRIBUTE_CHECK(tensor.device().is_cpu(), UnimplementedError, "from_torch: the LibTorch tensor is on ",
                   tensor.device().str(), "; this version takes host tensors only: call .cpu() first");
  const std::optional<DType> dtype = dtype_of(tensor.scalar_type());
  DISTRIBUTE_CHECK(dtype.has_value(), InvalidArgumentError, "from_torch: the LibTorch tensor holds ",
                   printed(tensor.scalar_type()), ", which no DType holds; convert it with .to(torch::kFloat32) (or "
                   "kFloat64, kFloat16, kBFloat16, kInt32, kInt64) first");
  DISTRIBUTE_CHECK(tensor.is_contiguous(), InvalidArgumentError, "from_torch: the LibTorch tensor is not contiguous "
                   "(sizes ", printed(tensor.sizes()), ", strides ", printed(tensor.strides()),
                   "); call .contiguous() first, which copies it");
  std::vector<std::int64_t> sizes(tensor.sizes().begin(), tensor.sizes().end());
  return Tensor::from_blob(tensor.data_ptr(), *dtype, Shape(std::move(sizes)), default_host_device(),
                           [keep = tensor]() mutable { keep.reset(); });
}

at::Tensor to_torch(const Tensor& tensor) {
  DISTRIBUTE_CHECK(tensor.defined(), FailedPreconditionError, "to_torch: the tensor is undefined");
  DISTRIBUTE_CHECK(tensor.device().is_cpu(), UnimplementedError, "to_torch: the tensor is in ",
                   tensor.device().short_name(), "'s memory; this LibTorch is built for host tensors only: "
                   "tensor.to(Device::cpu()) first");
  const std::vector<std::int64_t> sizes = tensor.shape().dims();
  auto* keep = new Tensor(tensor);
  return at::from_blob(const_cast<void*>(tensor.raw_data()), sizes, [keep](void*) { delete keep; },
                       at::TensorOptions().dtype(scalar_type_of(tensor.dtype())));
}

}  // namespace distribute
