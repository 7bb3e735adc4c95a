#include "distribute/device/shape.h"

#include "absl/strings/str_join.h"
#include "distribute/check.h"

namespace distribute {
namespace {

void check_dims(const std::vector<std::int64_t>& dims) {
  for (std::size_t i = 0; i < dims.size(); ++i) {
    DISTRIBUTE_CHECK(dims[i] >= 0, InvalidArgumentError, "Shape: dimension ", i, " is ", dims[i],
                     "; dimensions must be >= 0");
  }
}

}  // namespace

Shape::Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) { check_dims(dims_); }
Shape::Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) { check_dims(dims_); }

std::int64_t Shape::num_elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : dims_) n *= d;
  return n;
}

std::int64_t Shape::operator[](int i) const {
  const int r = rank();
  DISTRIBUTE_CHECK(i >= -r && i < r, OutOfRangeError, "Shape", to_string(), "[", i,
                   "]: index out of range for rank ", r);
  return dims_[static_cast<std::size_t>(i < 0 ? i + r : i)];
}

std::int64_t Shape::outer_size(int axis) const {
  std::int64_t n = 1;
  for (int i = 0; i < axis; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

std::int64_t Shape::inner_size(int axis) const {
  std::int64_t n = 1;
  for (int i = axis + 1; i < rank(); ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

Shape Shape::with_dim(int axis, std::int64_t size) const {
  std::vector<std::int64_t> dims = dims_;
  dims.at(static_cast<std::size_t>(axis)) = size;
  return Shape(std::move(dims));
}

Shape Shape::without_dim(int axis) const {
  std::vector<std::int64_t> dims = dims_;
  dims.erase(dims.begin() + axis);
  return Shape(std::move(dims));
}

std::string Shape::to_string() const {
  if (dims_.size() == 1) return absl::StrCat("(", dims_[0], ",)");
  return absl::StrCat("(", absl::StrJoin(dims_, ", "), ")");
}

std::string Shape::compact() const { return absl::StrCat("[", absl::StrJoin(dims_, ","), "]"); }

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape.to_string(); }

int normalize_axis(int axis, int rank, const char* what) {
  DISTRIBUTE_CHECK(rank > 0, InvalidArgumentError, what, ": axis=", axis,
                   " given for a rank-0 value; scalars have no axis (reshape to rank 1 first)");
  DISTRIBUTE_CHECK(axis >= -rank && axis < rank, InvalidArgumentError, what, ": axis=", axis,
                   " is out of range for a value of rank ", rank, "; use an axis in [", -rank, ", ",
                   rank, ")");
  return axis < 0 ? axis + rank : axis;
}

}  // namespace distribute
