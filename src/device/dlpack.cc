// from_dlpack / to_dlpack: DLPack's struct mapped onto Tensor, both ways without a copy.
#include "distribute/device/dlpack.h"

#include <dlpack/dlpack.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distribute/check.h"

namespace distribute {
namespace {

std::optional<DType> dtype_of(DLDataType type) {
  if (type.lanes != 1) return std::nullopt;
  switch (type.code) {
    case kDLFloat:
      if (type.bits == 32) return DType::kFloat32;
      if (type.bits == 64) return DType::kFloat64;
      if (type.bits == 16) return DType::kFloat16;
      return std::nullopt;
    case kDLBfloat: return type.bits == 16 ? std::optional(DType::kBFloat16) : std::nullopt;
    case kDLInt:
      if (type.bits == 32) return DType::kInt32;
      if (type.bits == 64) return DType::kInt64;
      return std::nullopt;
    default: return std::nullopt;
  }
}

DLDataType dl_type_of(DType dtype) {
  const auto bits = static_cast<std::uint8_t>(8 * dtype_size(dtype));
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16: return DLDataType{kDLFloat, bits, 1};
    case DType::kBFloat16: return DLDataType{kDLBfloat, bits, 1};
    case DType::kInt32:
    case DType::kInt64: return DLDataType{kDLInt, bits, 1};
  }
  throw InternalError(absl::StrCat("to_dlpack: unknown dtype value ", static_cast<int>(dtype)));
}

std::string type_text(DLDataType type) {
  const char* code = type.code == kDLInt      ? "int"
                     : type.code == kDLUInt   ? "uint"
                     : type.code == kDLFloat  ? "float"
                     : type.code == kDLBfloat ? "bfloat"
                                              : nullptr;
  std::string text = code != nullptr ? absl::StrCat(code, type.bits) : absl::StrCat("code ", type.code, ", ", type.bits, " bits");
  if (type.lanes != 1) absl::StrAppend(&text, " x ", type.lanes, " lanes");
  return text;
}

// What a DLManagedTensor made by to_dlpack points into: the tensor it keeps alive and its sizes.
struct Exported {
  DLManagedTensor managed{};
  Tensor tensor;
  std::vector<std::int64_t> sizes;
};

}  // namespace

Tensor from_dlpack(DLManagedTensor* managed) {
  DISTRIBUTE_CHECK(managed != nullptr, InvalidArgumentError, "from_dlpack: the DLManagedTensor is null");
  const DLTensor& dl = managed->dl_tensor;
  DISTRIBUTE_CHECK(dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDAHost, UnimplementedError,
                   "from_dlpack: the memory is on DLPack device type ", static_cast<int>(dl.device.device_type),
                   " (device ", dl.device.device_id, "); this version takes host memory only (kDLCPU, kDLCUDAHost): "
                   "copy the tensor to the host first");
  const std::optional<DType> dtype = dtype_of(dl.dtype);
  DISTRIBUTE_CHECK(dtype.has_value(), InvalidArgumentError, "from_dlpack: the elements are ", type_text(dl.dtype),
                   ", which no DType holds; convert them to float32, float64, float16, bfloat16, int32 or int64 "
                   "first");
  DISTRIBUTE_CHECK(dl.ndim >= 0 && (dl.ndim == 0 || dl.shape != nullptr), InvalidArgumentError,
                   "from_dlpack: ndim ", dl.ndim, " with ", dl.shape == nullptr ? "no" : "a", " shape array");
  std::vector<std::int64_t> sizes(dl.shape, dl.shape + dl.ndim);
  for (std::int64_t size : sizes) {
    DISTRIBUTE_CHECK(size >= 0, InvalidArgumentError, "from_dlpack: negative size in shape [",
                     absl::StrJoin(sizes, ", "), "]");
  }
  if (dl.strides != nullptr) {
    // Compact row-major: each dimension's stride is the product of the sizes after it (a
    // dimension of size 1 may have any stride: it is never stepped over).
    std::int64_t expected = 1;
    for (int d = dl.ndim - 1; d >= 0; --d) {
      DISTRIBUTE_CHECK(sizes[d] == 1 || dl.strides[d] == expected, InvalidArgumentError,
                       "from_dlpack: the tensor is not contiguous (sizes [", absl::StrJoin(sizes, ", "), "], strides [",
                       absl::StrJoin(dl.strides, dl.strides + dl.ndim, ", "),
                       "] in elements); make it contiguous in row-major order before exporting it");
      expected *= sizes[d];
    }
  }
  void* data = static_cast<std::byte*>(dl.data) + dl.byte_offset;
  return Tensor::from_blob(data, *dtype, Shape(std::move(sizes)), default_host_device(),
                           [managed] {
                             if (managed->deleter != nullptr) managed->deleter(managed);
                           });
}

DLManagedTensor* to_dlpack(const Tensor& tensor) {
  DISTRIBUTE_CHECK(tensor.defined(), FailedPreconditionError, "to_dlpack: the tensor is undefined");
  DISTRIBUTE_CHECK(tensor.device().is_cpu(), UnimplementedError, "to_dlpack: the tensor is in ",
                   tensor.device().short_name(), "'s memory; this version exports host memory only: "
                   "tensor.to(Device::cpu()) first");
  auto exported = std::make_unique<Exported>();
  exported->tensor = tensor;
  exported->sizes = tensor.shape().dims();
  DLTensor& dl = exported->managed.dl_tensor;
  dl.data = const_cast<void*>(tensor.raw_data());
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = tensor.rank();
  dl.dtype = dl_type_of(tensor.dtype());
  dl.shape = exported->sizes.data();
  dl.strides = nullptr;
  dl.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = [](DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); };
  return &exported.release()->managed;
}

}  // namespace distribute
