// Shape: dimensions, sizes and their TF-style rendering; axis normalisation.
#include "distribute/device/shape.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "distribute/check.h"

namespace distribute {
namespace {

void check_dims(std::span<const std::int64_t> dims) {
  for (std::size_t i = 0; i < dims.size(); ++i) {
    DISTRIBUTE_CHECK(dims[i] >= 0, InvalidArgumentError, "Shape: dimension ", i, " is ", dims[i],
                     "; dimensions must be >= 0");
  }
}

}  // namespace

Shape::Shape(std::span<const std::int64_t> dims) : dims_(dims.begin(), dims.end()) {
  check_dims(dims);
  for (std::int64_t d : dims) num_elements_ *= d;
}

Shape::Shape(std::initializer_list<std::int64_t> dims)
    : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}
Shape::Shape(std::vector<std::int64_t> dims) : Shape(std::span<const std::int64_t>(dims)) {}

std::int64_t Shape::operator[](int i) const {
  const int r = rank();
  DISTRIBUTE_CHECK(i >= -r && i < r, OutOfRangeError, "Shape", to_string(), "[", i,
                   "]: index out of range for rank ", r);
  return span()[static_cast<std::size_t>(i < 0 ? i + r : i)];
}

std::int64_t Shape::outer_size(int axis) const {
  std::int64_t n = 1;
  for (int i = 0; i < axis; ++i) n *= span()[static_cast<std::size_t>(i)];
  return n;
}

std::int64_t Shape::inner_size(int axis) const {
  std::int64_t n = 1;
  for (int i = axis + 1; i < rank(); ++i) n *= span()[static_cast<std::size_t>(i)];
  return n;
}

Shape Shape::with_dim(int axis, std::int64_t size) const {
  DISTRIBUTE_CHECK(axis >= 0 && axis < rank() && size >= 0, InvalidArgumentError, "Shape", to_string(),
                   ".with_dim(", axis, ", ", size, "): needs 0 <= axis < rank and size >= 0");
  Shape out = *this;
  out.dims_[static_cast<std::size_t>(axis)] = size;
  out.num_elements_ = outer_size(axis) * size * inner_size(axis);
  return out;
}

Shape Shape::without_dim(int axis) const {
  std::vector<std::int64_t> dims = this->dims();
  dims.erase(dims.begin() + axis);
  return Shape(std::move(dims));
}

std::string Shape::to_string() const {
  if (rank() == 1) return absl::StrCat("(", span()[0], ",)");
  return absl::StrCat("(", absl::StrJoin(span(), ", "), ")");
}

std::string Shape::compact() const { return absl::StrCat("[", absl::StrJoin(span(), ","), "]"); }

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
