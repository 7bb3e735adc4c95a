// Shape: dimensions, sizes and their TF-style rendering; axis normalisation.
#include "distribute/device/shape.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_join.h"
#include "distribute/check.h"

namespace distribute {
namespace {

// The number of elements of `dims`. Zero dimensions aside, the product must fit in an int64, so
// that outer_size, inner_size and with_dim of the shape cannot overflow either.
std::int64_t checked_num_elements(std::span<const std::int64_t> dims) {
  std::int64_t nonzero = 1;
  bool has_zero = false;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    DISTRIBUTE_CHECK(dims[i] >= 0, InvalidArgumentError, "Shape: dimension ", i, " is ", dims[i],
                     "; dimensions must be >= 0");
    if (dims[i] == 0) {
      has_zero = true;
      continue;
    }
    DISTRIBUTE_CHECK(!__builtin_mul_overflow(nonzero, dims[i], &nonzero), InvalidArgumentError, "Shape: (",
                     absl::StrJoin(dims, ", "), ") has more elements than an int64 counts: its ",
                     has_zero ? "non-zero " : "", "dimensions multiply to more than ",
                     std::numeric_limits<std::int64_t>::max());
  }
  return has_zero ? 0 : nonzero;
}

}  // namespace

Shape::Shape(std::span<const std::int64_t> dims)
    : dims_(dims.begin(), dims.end()), num_elements_(checked_num_elements(dims)) {}

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
  out.num_elements_ = checked_num_elements(out.span());
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
