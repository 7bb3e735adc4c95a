// Tensor: a dense, typed, shaped block of memory on a device. Copies are cheap and share the same
// storage (like tf.Tensor handles); clone() makes a deep copy. Host tensors expose zero-copy Eigen
// views (flat(), matrix()). Prints like TF:
//   <Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>
#pragma once

#include <cassert>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <vector>

#include <Eigen/Core>

#include "distribute/check.h"
#include "distribute/detail/storage.h"
#include "distribute/device/device.h"
#include "distribute/device/dtype.h"
#include "distribute/device/shape.h"

namespace distribute {

class Tensor;

namespace detail {
// Makes up to `count` tensors viewing parts of one storage (the outputs of one collective, carved
// from one block) for the price of one reference-count update: the references are taken together
// up front, and those not handed out are given back when the maker goes.
class TensorViews {
 public:
  TensorViews(const StorageRef& storage, std::size_t count) : storage_(storage.get()), left_(count) {
    if (count != 0) StorageRef::acquire(storage_, static_cast<std::int64_t>(count));
  }
  TensorViews(const TensorViews&) = delete;
  TensorViews& operator=(const TensorViews&) = delete;
  ~TensorViews() {
    if (left_ != 0) StorageRef::release(storage_, static_cast<std::int64_t>(left_));
  }

  // The view of `shape` elements of `dtype` from byte `offset` on; at most `count` calls.
  inline Tensor make(std::size_t offset, DType dtype, const Shape& shape);

 private:
  Storage* storage_;
  std::size_t left_;
};
}  // namespace detail

class Tensor {
 public:
  // An undefined tensor (defined() is false); most methods throw FailedPreconditionError on it.
  Tensor() = default;

  // Uninitialised / zero-filled memory of the given type and shape on `device` (by default the
  // replica's device inside a replica's function, else CPU:0: see default_device()).
  static Tensor empty(DType dtype, Shape shape, const Device& device = default_device());
  static Tensor zeros(DType dtype, Shape shape, const Device& device = default_device());

  // A zero-copy view of memory the caller owns, host memory or device memory of `device` (a
  // user's own cudaMalloc'd buffer goes into all_reduce without a copy). The tensor does not own
  // the memory: it must outlive every tensor sharing it. InvalidArgumentError for a null pointer
  // with elements to hold.
  static Tensor from_blob(void* data, DType dtype, Shape shape, const Device& device);

  // Throws InvalidArgumentError unless values.size() == shape.num_elements().
  template <Element T>
  static Tensor from_vector(std::vector<T> values, Shape shape, const Device& device = default_device());
  // A rank-1 tensor holding `values`.
  template <Element T>
  static Tensor from_vector(std::vector<T> values);
  // A rank-0 tensor.
  template <Element T>
  static Tensor scalar(T value, const Device& device = default_device());

  bool defined() const { return static_cast<bool>(storage_); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  std::int64_t num_elements() const { return defined() ? shape_.num_elements() : 0; }
  std::size_t nbytes() const { return static_cast<std::size_t>(num_elements()) * dtype_size(dtype_); }
  const Device& device() const;

  // The first element's address in device memory (nullptr for an empty tensor).
  void* raw_data() const;
  // Typed host pointers; throw InvalidArgumentError when T is not dtype(), FailedPreconditionError
  // when the tensor is not in host memory.
  template <Element T>
  T* data() const;

  // Copies the elements to a host vector; T must be dtype()'s type.
  template <Element T>
  std::vector<T> to_vector() const;
  // The only element; throws InvalidArgumentError unless num_elements() == 1.
  template <Element T>
  T item() const;

  // Zero-copy Eigen views of host data: all elements in row-major order, or a rank-2 tensor.
  template <Element T>
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> flat() const;
  template <Element T>
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> matrix() const;

  // A deep copy on the same device / on `device`.
  Tensor clone() const;
  Tensor to(const Device& device) const;
  // The same storage seen with another shape of the same number of elements.
  Tensor reshape(Shape shape) const;

  // True when both view the same block of memory (possibly different parts of it).
  bool same_storage(const Tensor& other) const { return storage_ == other.storage_; }

 private:
  friend class detail::TensorViews;
  Tensor(detail::StorageRef storage, DType dtype, Shape&& shape, std::size_t offset = 0)
      : storage_(std::move(storage)), dtype_(dtype), shape_(std::move(shape)), offset_(offset) {}
  Tensor(detail::StorageRef storage, DType dtype, const Shape& shape, std::size_t offset = 0)
      : storage_(std::move(storage)), dtype_(dtype), shape_(shape), offset_(offset) {}
  void check_defined(const char* what) const {
    if (!defined()) throw_undefined(what);
  }
  [[noreturn]] static void throw_undefined(const char* what);
  void check_host_type(DType expected, const char* what) const;

  detail::StorageRef storage_;
  DType dtype_ = DType::kFloat32;
  Shape shape_;
  std::size_t offset_ = 0;  // bytes from the start of the storage
};

// TF-style: "<Tensor: shape=(2,), dtype=float32, numpy=[1.0, 2.0]>"; from rank 2 on the array starts
// on its own line, one row per line, as numpy prints it.
std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

// ---------------------------------------------------------------------------------------------
// Implementation of the templates and of the accessors every collective calls per leaf.

// Inline: made once per output leaf of every all_reduce.
inline Tensor detail::TensorViews::make(std::size_t offset, DType dtype, const Shape& shape) {
  assert(left_ != 0 && "TensorViews: more views than references taken");
  --left_;
  return Tensor(StorageRef(storage_), dtype, shape, offset);
}

inline const Device& Tensor::device() const {
  check_defined("device");
  return storage_->device();
}

inline void* Tensor::raw_data() const {
  check_defined("raw_data");
  return storage_->data() == nullptr ? nullptr : static_cast<char*>(storage_->data()) + offset_;
}

template <Element T>
Tensor Tensor::from_vector(std::vector<T> values, Shape shape, const Device& device) {
  DISTRIBUTE_CHECK(static_cast<std::int64_t>(values.size()) == shape.num_elements(),
                   InvalidArgumentError, "Tensor::from_vector: ", values.size(),
                   " values do not fill shape ", shape.to_string(), ", which holds ",
                   shape.num_elements(), " elements");
  if (device.is_cpu()) {
    Tensor host = empty(dtype_v<T>, std::move(shape), device);
    if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
    return host;
  }
  Tensor out = empty(dtype_v<T>, std::move(shape), device);
  detail::copy_bytes(out.raw_data(), device, values.data(), Device::cpu(), values.size() * sizeof(T));
  return out;
}

template <Element T>
Tensor Tensor::from_vector(std::vector<T> values) {
  Shape shape{static_cast<std::int64_t>(values.size())};
  return from_vector<T>(std::move(values), std::move(shape));
}

template <Element T>
Tensor Tensor::scalar(T value, const Device& device) {
  return from_vector<T>(std::vector<T>{value}, Shape{}, device);
}

template <Element T>
T* Tensor::data() const {
  check_host_type(dtype_v<T>, "data");
  return static_cast<T*>(raw_data());
}

template <Element T>
std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector");
  DISTRIBUTE_CHECK(dtype_v<T> == dtype_, InvalidArgumentError, "Tensor::to_vector<",
                   dtype_name(dtype_v<T>), ">: the tensor holds ", dtype_name(dtype_),
                   "; call to_vector<", dtype_name(dtype_), "-type>() instead");
  std::vector<T> out(static_cast<std::size_t>(num_elements()));
  if (!out.empty()) detail::copy_bytes(out.data(), Device::cpu(), raw_data(), device(), nbytes());
  return out;
}

template <Element T>
T Tensor::item() const {
  check_defined("item");
  DISTRIBUTE_CHECK(num_elements() == 1, InvalidArgumentError, "Tensor::item: the tensor has shape ",
                   shape_.to_string(), " (", num_elements(), " elements); item() needs exactly one");
  return to_vector<T>()[0];
}

template <Element T>
Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> Tensor::flat() const {
  return {data<T>(), static_cast<Eigen::Index>(num_elements())};
}

template <Element T>
Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> Tensor::matrix() const {
  DISTRIBUTE_CHECK(rank() == 2, InvalidArgumentError, "Tensor::matrix: the tensor has rank ", rank(),
                   " (shape ", shape_.to_string(), "); matrix() needs rank 2, reshape() first");
  return {data<T>(), static_cast<Eigen::Index>(shape_[0]), static_cast<Eigen::Index>(shape_[1])};
}

}  // namespace distribute
