// Tensor: a dense, typed, shaped block of memory on a device, in row-major (C) order. Copies are
// cheap handles to the same storage (like tf.Tensor); clone() makes a deep copy. Host tensors give
// zero-copy Eigen views (flat(), matrix(), array()), and Eigen matrices and arrays are viewed as
// tensors without a copy (view()), so a gradient computed with Eigen goes into a collective as it
// is. A const Tensor gives read-only data. Prints like TF:
//   <Tensor: shape=(6,), dtype=int32, numpy=[1, 2, 3, 1, 2, 3]>
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "distribute/check.h"
#include "distribute/device/device.h"
#include "distribute/device/dtype.h"
#include "distribute/device/shape.h"

namespace distribute {

class Tensor;

namespace detail {

class Storage;      // one block of memory on one device (src/device/storage.h)
class TensorViews;  // many tensors viewing one block (device/internal/tensor_views.h)

// A counted reference to a Storage; null by default. Copies share the Storage, which goes back to
// its device's memory with its last reference. The counting is out of line (src/device/), where
// a replica thread batches the references it drops during a step.
class StorageRef {
 public:
  StorageRef() = default;
  StorageRef(const StorageRef& other) noexcept : storage_(other.storage_) {
    if (storage_ != nullptr) retain(storage_, 1);
  }
  StorageRef(StorageRef&& other) noexcept : storage_(std::exchange(other.storage_, nullptr)) {}
  StorageRef& operator=(StorageRef other) noexcept {
    std::swap(storage_, other.storage_);
    return *this;
  }
  ~StorageRef() {
    if (storage_ != nullptr) drop(storage_);
  }

  // Takes over a reference counted before (with retain, or by making the Storage).
  static StorageRef adopt(Storage* storage) noexcept {
    StorageRef ref;
    ref.storage_ = storage;
    return ref;
  }
  Storage* get() const { return storage_; }
  Storage* operator->() const { return storage_; }
  explicit operator bool() const { return storage_ != nullptr; }
  friend bool operator==(const StorageRef& a, const StorageRef& b) { return a.storage_ == b.storage_; }

  // Counts `count` more references / gives `count` back at once.
  static void retain(Storage* storage, std::int64_t count) noexcept;
  static void release(Storage* storage, std::int64_t count) noexcept;

 private:
  // Gives one reference back, or defers it inside a batch of this thread's.
  static void drop(Storage* storage) noexcept;

  Storage* storage_ = nullptr;
};

// Where the block starts and which device holds it.
void* storage_data(const Storage& storage);
const Device& storage_device(const Storage& storage);

// Copies nbytes between two pointers, whatever devices they are on.
void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                std::size_t nbytes);

}  // namespace detail

// An Eigen object whose elements lie contiguously in memory (a Matrix, an Array, or a Map of
// either without strides), of a tensor element type. Its storage order decides the tensor's shape:
// see Tensor::view.
// Const objects are not: a view gives write access.
template <class E>
concept EigenDense =
    std::is_base_of_v<Eigen::DenseBase<E>, E> && Element<typename E::Scalar> &&
    requires(E& e) {
      { e.data() } -> std::same_as<typename E::Scalar*>;
    };

class Tensor {
 public:
  // An undefined tensor (defined() is false); most methods throw FailedPreconditionError on it.
  Tensor() = default;

  // Uninitialised / zero-filled memory of the given type and shape on `device` (by default the
  // replica's device inside a replica's function, else CPU:0: see default_device()).
  // InvalidArgumentError when the shape's bytes overflow a size_t.
  static Tensor empty(DType dtype, Shape shape, const Device& device = default_device());
  static Tensor zeros(DType dtype, Shape shape, const Device& device = default_device());

  // A zero-copy view of memory the caller owns, host memory or device memory of `device` (a
  // user's own cudaMalloc'd buffer goes into all_reduce without a copy). The tensor does not own
  // the memory: it must outlive every tensor sharing it. InvalidArgumentError for a null pointer
  // with elements to hold, and for a shape whose bytes overflow a size_t.
  static Tensor from_blob(void* data, DType dtype, Shape shape, const Device& device);
  // The same with the dtype taken from T; host memory unless `device` says otherwise.
  template <Element T>
  static Tensor from_blob(T* data, Shape shape, const Device& device = Device::cpu());
  // The same for memory another owner frees: `release` runs once, on whichever thread drops the
  // last tensor sharing the memory, and lets the owner go (how LibTorch and DLPack tensors come in
  // without a copy). When this throws, `release` is not run.
  static Tensor from_blob(void* data, DType dtype, Shape shape, const Device& device, std::function<void()> release);

  // A zero-copy view of an Eigen matrix or array in host memory (which must outlive the view).
  // A vector (one row or one column at compile time) has shape (size,); a row-major r x c object
  // has shape (r, c); a column-major r x c object is laid out as its transpose in row-major order,
  // so its shape is (c, r), and matrix<T, Eigen::ColMajor>() gives back the r x c matrix.
  // InvalidArgumentError for a Map with strides (not contiguous).
  template <EigenDense E>
  static Tensor view(E& eigen);

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
  void* raw_data() {
    check_defined("raw_data");
    return data_;
  }
  const void* raw_data() const {
    check_defined("raw_data");
    return data_;
  }
  // Typed host pointers; throw InvalidArgumentError when T is not dtype(), FailedPreconditionError
  // when the tensor is not in host memory.
  template <Element T>
  T* data();
  template <Element T>
  const T* data() const;

  // Copies the elements to a host vector; T must be dtype()'s type.
  template <Element T>
  std::vector<T> to_vector() const;
  // The only element; throws InvalidArgumentError unless num_elements() == 1.
  template <Element T>
  T item() const;

  // Zero-copy Eigen views of host data: all elements in order, and a rank-2 tensor (r, c) as an
  // r x c row-major matrix or array, or (Order = Eigen::ColMajor) as the c x r column-major one
  // over the same memory (see view()).
  template <Element T>
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> flat();
  template <Element T>
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> flat() const;
  template <Element T, int Order = Eigen::RowMajor>
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>> matrix();
  template <Element T, int Order = Eigen::RowMajor>
  Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>> matrix() const;
  template <Element T, int Order = Eigen::RowMajor>
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Order>> array();
  template <Element T, int Order = Eigen::RowMajor>
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Order>> array() const;

  // A deep copy on the same device / on `device`.
  Tensor clone() const;
  Tensor to(const Device& device) const;
  // This tensor, in host memory, as a tensor of the CPU device `cpu`, with no copy: the same
  // elements in the same memory (one address space serves every CPU), reporting `cpu` as its
  // device, and same_storage(*this). How a CPU replica's part of a batch reports its replica's
  // device. InvalidArgumentError unless the tensor is on a CPU device and so is `cpu`.
  Tensor view_on(const Device& cpu) const;
  // The same storage seen with another shape of the same number of elements.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of dimension 0, sharing this tensor's storage (no copy): shape (end - begin,
  // ...the other dimensions). How a batch is split between replicas. InvalidArgumentError for a
  // rank-0 tensor, OutOfRangeError unless 0 <= begin <= end <= shape()[0].
  Tensor slice(std::int64_t begin, std::int64_t end) const;

  // True when both view the same block of memory (possibly different parts of it).
  bool same_storage(const Tensor& other) const;

  // A view of `data`, inside the block `storage` holds (and keeps alive), with this dtype and
  // shape: how the library carves one collective's outputs from one block (detail::TensorViews).
  // A program makes tensors with the factories above.
  Tensor(detail::StorageRef storage, void* data, DType dtype, Shape shape)
      : storage_(std::move(storage)), data_(data), dtype_(dtype), shape_(std::move(shape)) {}

 private:
  // A tensor owning all of `storage`.
  Tensor(detail::StorageRef storage, DType dtype, Shape shape);
  void check_defined(const char* what) const {
    if (!defined()) [[unlikely]] throw_undefined(what);
  }
  [[noreturn]] static void throw_undefined(const char* what);
  void check_host_type(DType expected, const char* what) const;
  // The rows and columns of a rank-2 tensor seen as an Eigen object of this storage order.
  std::pair<Eigen::Index, Eigen::Index> eigen_dims(bool row_major, const char* what) const;
  static Tensor view_host(void* data, DType dtype, Shape shape, bool contiguous, const char* what);

  detail::StorageRef storage_;
  void* data_ = nullptr;  // the first element: the storage's start, or later for a view into it
  DType dtype_ = DType::kFloat32;
  Shape shape_;
};

// TF-style: "<Tensor: shape=(2,), dtype=float32, numpy=[1.0, 2.0]>"; from rank 2 on the array starts
// on its own line, one row per line, as numpy prints it.
std::ostream& operator<<(std::ostream& os, const Tensor& tensor);
// The values alone, as they follow "numpy=" above (other printers embed them, e.g. Variable's).
void print_numpy(std::ostream& os, const Tensor& tensor);

// ---------------------------------------------------------------------------------------------
// Implementation of the templates and of the accessors every collective calls per leaf.

template <Element T>
Tensor Tensor::from_blob(T* data, Shape shape, const Device& device) {
  return from_blob(static_cast<void*>(data), dtype_v<T>, std::move(shape), device);
}

template <EigenDense E>
Tensor Tensor::view(E& eigen) {
  using T = typename E::Scalar;
  const bool vector = E::IsVectorAtCompileTime;
  const bool row_major = E::IsRowMajor;
  const bool contiguous =
      eigen.innerStride() == 1 && (vector || eigen.outerStride() == (row_major ? eigen.cols() : eigen.rows()));
  Shape shape = vector      ? Shape{static_cast<std::int64_t>(eigen.size())}
                : row_major ? Shape{static_cast<std::int64_t>(eigen.rows()), static_cast<std::int64_t>(eigen.cols())}
                            : Shape{static_cast<std::int64_t>(eigen.cols()), static_cast<std::int64_t>(eigen.rows())};
  return view_host(eigen.data(), dtype_v<T>, std::move(shape), contiguous, "Tensor::view");
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
T* Tensor::data() {
  check_host_type(dtype_v<T>, "data");
  return static_cast<T*>(data_);
}

template <Element T>
const T* Tensor::data() const {
  check_host_type(dtype_v<T>, "data");
  return static_cast<const T*>(data_);
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
Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> Tensor::flat() {
  return {data<T>(), static_cast<Eigen::Index>(num_elements())};
}

template <Element T>
Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> Tensor::flat() const {
  return {data<T>(), static_cast<Eigen::Index>(num_elements())};
}

template <Element T, int Order>
Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>> Tensor::matrix() {
  const auto [rows, cols] = eigen_dims(Order == Eigen::RowMajor, "matrix");
  return {data<T>(), rows, cols};
}

template <Element T, int Order>
Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>> Tensor::matrix() const {
  const auto [rows, cols] = eigen_dims(Order == Eigen::RowMajor, "matrix");
  return {data<T>(), rows, cols};
}

template <Element T, int Order>
Eigen::Map<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Order>> Tensor::array() {
  const auto [rows, cols] = eigen_dims(Order == Eigen::RowMajor, "array");
  return {data<T>(), rows, cols};
}

template <Element T, int Order>
Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Order>> Tensor::array() const {
  const auto [rows, cols] = eigen_dims(Order == Eigen::RowMajor, "array");
  return {data<T>(), rows, cols};
}

}  // namespace distribute
