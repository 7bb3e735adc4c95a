#include "distribute/device/tensor.h"

#include "absl/strings/str_cat.h"
#include "device/gpu_runtime.h"
#include "distribute/device/gpu.h"

namespace distribute {

Tensor Tensor::empty(DType dtype, Shape shape, const Device& device) {
  const std::size_t nbytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype);
  return Tensor(detail::allocate_storage(device, nbytes), dtype, std::move(shape));
}

Tensor Tensor::zeros(DType dtype, Shape shape, const Device& device) {
  Tensor t = empty(dtype, std::move(shape), device);
  if (t.nbytes() == 0) return t;
  if (device.is_gpu()) {
    detail::gpu::fill_zero(t.raw_data(), device, t.nbytes());
  } else {
    std::memset(t.raw_data(), 0, t.nbytes());
  }
  return t;
}

Tensor Tensor::from_blob(void* data, DType dtype, Shape shape, const Device& device) {
  DISTRIBUTE_CHECK(data != nullptr || shape.num_elements() == 0, InvalidArgumentError,
                   "Tensor::from_blob: null data for shape ", shape.to_string(), " (", shape.num_elements(),
                   " elements); pass the address of the caller's buffer");
  DISTRIBUTE_CHECK(device.is_cpu() || detail::gpu::built(), UnimplementedError, "Tensor::from_blob on ",
                   device.short_name(), ": this build of distribute has no GPU backend");
  if (device.is_gpu()) physical_gpu_of(device);  // OutOfRangeError when it does not exist
  const std::size_t nbytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype);
  return Tensor(detail::StorageRef::make(data, nbytes, device, nullptr), dtype, std::move(shape));
}

void Tensor::throw_undefined(const char* what) {
  throw FailedPreconditionError(absl::StrCat("Tensor::", what,
                                             ": the tensor is undefined (default-constructed); create it with "
                                             "Tensor::from_vector, Tensor::scalar or Tensor::empty"));
}

void Tensor::check_host_type(DType expected, const char* what) const {
  check_defined(what);
  DISTRIBUTE_CHECK(expected == dtype_, InvalidArgumentError, "Tensor::", what, "<",
                   dtype_name(expected), ">: the tensor holds ", dtype_name(dtype_));
  DISTRIBUTE_CHECK(device().is_cpu(), FailedPreconditionError, "Tensor::", what,
                   ": the tensor is on ", device().short_name(),
                   "; host views need host memory, use to(Device::cpu()) or to_vector()");
}

Tensor Tensor::clone() const { return to(device()); }

Tensor Tensor::to(const Device& target) const {
  check_defined("to");
  Tensor out = empty(dtype_, shape_, target);
  detail::copy_bytes(out.raw_data(), target, raw_data(), device(), nbytes());
  return out;
}

Tensor Tensor::reshape(Shape shape) const {
  check_defined("reshape");
  DISTRIBUTE_CHECK(shape.num_elements() == num_elements(), InvalidArgumentError,
                   "Tensor::reshape: cannot view ", num_elements(), " elements of shape ",
                   shape_.to_string(), " as shape ", shape.to_string(), " (", shape.num_elements(),
                   " elements)");
  return Tensor(storage_, dtype_, std::move(shape), offset_);
}

}  // namespace distribute
