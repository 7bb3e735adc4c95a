// Shape: the dimensions of a dense tensor. Shape{} is a scalar (rank 0); Shape{2, 3} a 2x3 matrix.
// Prints like TF: "()", "(6,)", "(2, 3)".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace distribute {

class Shape {
 public:
  Shape() = default;
  // Throws InvalidArgumentError if a dimension is negative, or if the dimensions (zeros aside)
  // multiply to more than an int64 holds.
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::vector<std::int64_t> dims);
  // Copies and moves go element by element: InlinedVector's own copy of its inline buffer reads
  // the unused part of it, which GCC reports as uninitialised in every user's build. A moved-from
  // shape is a scalar's.
  Shape(const Shape& other) : dims_(other.dims_.begin(), other.dims_.end()), num_elements_(other.num_elements_) {}
  Shape(Shape&& other) noexcept : num_elements_(std::exchange(other.num_elements_, 1)) { take(other); }
  Shape& operator=(const Shape& other) {
    dims_.assign(other.dims_.begin(), other.dims_.end());
    num_elements_ = other.num_elements_;
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) {
      num_elements_ = std::exchange(other.num_elements_, 1);
      take(other);
    }
    return *this;
  }

  int rank() const { return static_cast<int>(dims_.size()); }
  std::int64_t num_elements() const { return num_elements_; }
  // Dimension i, 0 <= i < rank(); negative i counts from the end. Throws OutOfRangeError otherwise.
  std::int64_t operator[](int i) const;
  std::vector<std::int64_t> dims() const { return {dims_.begin(), dims_.end()}; }
  // The dimensions without a copy.
  std::span<const std::int64_t> span() const { return {dims_.data(), dims_.size()}; }

  // The product of the dimensions before / after `axis` (1 when there are none).
  std::int64_t outer_size(int axis) const;
  std::int64_t inner_size(int axis) const;
  // A copy with dimension `axis` replaced / removed.
  Shape with_dim(int axis, std::int64_t size) const;
  Shape without_dim(int axis) const;

  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  // "(2, 3)"; compact() gives "[2,3]" for signatures such as "float32[2,3]".
  std::string to_string() const;
  std::string compact() const;

 private:
  explicit Shape(std::span<const std::int64_t> dims);
  // Takes other's dimensions (stealing them when they are on the heap) and leaves it a scalar's.
  void take(Shape& other) noexcept {
    if (other.dims_.size() > kInlineRank) {
      dims_ = std::move(other.dims_);
    } else {
      dims_.assign(other.dims_.begin(), other.dims_.end());
    }
    other.dims_.clear();
  }

  static constexpr std::size_t kInlineRank = 6;

  // Up to rank 6 the dimensions live inside the shape, which every tensor handle holds: no
  // allocation per handle.
  absl::InlinedVector<std::int64_t, kInlineRank> dims_;
  std::int64_t num_elements_ = 1;  // every buffer's size is asked for on every collective
};

std::ostream& operator<<(std::ostream& os, const Shape& shape);

// Checks `axis` against `rank` for the operation `what` and returns it normalised to [0, rank):
// negative axes count from the end, as in TF. Throws InvalidArgumentError when out of range.
int normalize_axis(int axis, int rank, const char* what);

}  // namespace distribute
