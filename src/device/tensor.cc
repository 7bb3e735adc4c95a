// Tensor: making, viewing, copying and reshaping; the storage handles behind it.
#include "distribute/device/tensor.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "device/gpu_runtime.h"
#include "device/storage.h"
#include "distribute/device/gpu.h"
#include "distribute/device/internal/tensor_views.h"

namespace distribute {

Tensor::Tensor(detail::StorageRef storage, DType dtype, Shape shape)
    : storage_(std::move(storage)), dtype_(dtype), shape_(std::move(shape)) {
  if (storage_) data_ = storage_->data();
}

namespace {

// The bytes of `shape` elements of `dtype`; InvalidArgumentError when they overflow a size_t.
std::size_t checked_nbytes(DType dtype, const Shape& shape, const char* what) {
  std::size_t nbytes = 0;
  DISTRIBUTE_CHECK(!__builtin_mul_overflow(static_cast<std::size_t>(shape.num_elements()), dtype_size(dtype), &nbytes),
                   InvalidArgumentError, "Tensor::", what, ": ", shape.num_elements(), " elements of ",
                   dtype_name(dtype), " (shape ", shape.to_string(), ") take more bytes than a size_t counts (",
                   std::numeric_limits<std::size_t>::max(), ")");
  return nbytes;
}

}  // namespace

const Device& Tensor::device() const {
  check_defined("device");
  return storage_->device();
}

Tensor Tensor::empty(DType dtype, Shape shape, const Device& device) {
  const std::size_t nbytes = checked_nbytes(dtype, shape, "empty");
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
  return from_blob(data, dtype, std::move(shape), device, nullptr);
}

Tensor Tensor::from_blob(void* data, DType dtype, Shape shape, const Device& device, std::function<void()> release) {
  DISTRIBUTE_CHECK(data != nullptr || shape.num_elements() == 0, InvalidArgumentError,
                   "Tensor::from_blob: null data for shape ", shape.to_string(), " (", shape.num_elements(),
                   " elements); pass the address of the caller's buffer");
  DISTRIBUTE_CHECK(device.is_cpu() || detail::gpu::built(), UnimplementedError, "Tensor::from_blob on ",
                   device.short_name(), ": this build of distribute has no GPU backend");
  if (device.is_gpu()) physical_gpu_of(device);  // OutOfRangeError when it does not exist
  const std::size_t nbytes = checked_nbytes(dtype, shape, "from_blob");
  detail::Storage::Release deleter;
  if (release) deleter = [release = std::move(release)](void*, std::size_t) { release(); };
  return Tensor(detail::make_storage(data, nbytes, device, std::move(deleter)), dtype, std::move(shape));
}

Tensor Tensor::view_host(void* data, DType dtype, Shape shape, bool contiguous, const char* what) {
  DISTRIBUTE_CHECK(contiguous, InvalidArgumentError, what, ": the Eigen object's elements are not contiguous (a Map "
                   "with strides, or a block of a larger matrix); copy it into a Matrix or Array first");
  return from_blob(data, dtype, std::move(shape), Device::cpu());
}

std::pair<Eigen::Index, Eigen::Index> Tensor::eigen_dims(bool row_major, const char* what) const {
  DISTRIBUTE_CHECK(rank() == 2, InvalidArgumentError, "Tensor::", what, ": the tensor has rank ", rank(), " (shape ",
                   shape_.to_string(), "); ", what, "() needs rank 2, reshape() first");
  const auto rows = static_cast<Eigen::Index>(shape_[0]);
  const auto cols = static_cast<Eigen::Index>(shape_[1]);
  return row_major ? std::pair{rows, cols} : std::pair{cols, rows};
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
  return Tensor(storage_, data_, dtype_, std::move(shape));
}

bool Tensor::same_storage(const Tensor& other) const {
  return storage_ == other.storage_ || (storage_ && other.storage_ && storage_->block() == other.storage_->block());
}

Tensor Tensor::view_on(const Device& cpu) const {
  check_defined("view_on");
  DISTRIBUTE_CHECK(device().is_cpu() && cpu.is_cpu(), InvalidArgumentError, "Tensor::view_on: a tensor on ",
                   device().short_name(), " cannot be seen as one of ", cpu.short_name(),
                   " without a copy; view_on relabels host memory for another CPU device (use to() to copy)");
  return Tensor(alias_storage(storage_, cpu), data_, dtype_, shape_);
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  check_defined("slice");
  DISTRIBUTE_CHECK(rank() >= 1, InvalidArgumentError, "Tensor::slice: the tensor has shape ", shape_.to_string(),
                   " (a scalar); slice() takes rows of dimension 0");
  const std::int64_t rows = shape_[0];
  DISTRIBUTE_CHECK(0 <= begin && begin <= end && end <= rows, OutOfRangeError, "Tensor::slice: rows [", begin, ", ",
                   end, ") are not within the ", rows, " rows of shape ", shape_.to_string(),
                   "; use 0 <= begin <= end <= ", rows);
  const std::size_t row_bytes = static_cast<std::size_t>(shape_.inner_size(0)) * dtype_size(dtype_);
  void* first = data_ == nullptr ? nullptr : static_cast<char*>(data_) + static_cast<std::size_t>(begin) * row_bytes;
  return Tensor(storage_, first, dtype_, shape_.with_dim(0, end - begin));
}

}  // namespace distribute

namespace distribute::detail {

TensorViews::TensorViews(const StorageRef& storage, std::size_t count)
    : storage_(storage.get()),
      base_(storage ? static_cast<char*>(storage->data()) : nullptr),
      left_(storage ? count : 0) {
  if (left_ != 0) StorageRef::retain(storage_, static_cast<std::int64_t>(left_));
}

TensorViews::~TensorViews() {
  if (left_ != 0) StorageRef::release(storage_, static_cast<std::int64_t>(left_));
}

}  // namespace distribute::detail
