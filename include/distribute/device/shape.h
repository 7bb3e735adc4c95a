// Shape: the dimensions of a dense tensor. Shape{} is a scalar (rank 0); Shape{2, 3} a 2x3 matrix.
// Prints like TF: "()", "(6,)", "(2, 3)".
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace distribute {

class Shape {
 public:
  Shape() = default;
  // Throws InvalidArgumentError if a dimension is negative.
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::vector<std::int64_t> dims);
  Shape(const Shape& other) : rank_(other.rank_), num_elements_(other.num_elements_), dims_(other.dims_) {
    if (rank_ > kInlineRank) copy_heap_from(other);
  }
  // A moved-from shape is a scalar's.
  Shape(Shape&& other) noexcept
      : rank_(std::exchange(other.rank_, 0)),
        num_elements_(std::exchange(other.num_elements_, 1)),
        dims_(other.dims_) {}
  Shape& operator=(const Shape& other) {
    if (this != &other) *this = Shape(other);
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    std::swap(rank_, other.rank_);
    std::swap(num_elements_, other.num_elements_);
    std::swap(dims_, other.dims_);
    return *this;
  }
  ~Shape() {
    if (rank_ > kInlineRank) delete[] dims_.heap;
  }

  int rank() const { return rank_; }
  std::int64_t num_elements() const { return num_elements_; }
  // Dimension i, 0 <= i < rank(); negative i counts from the end. Throws OutOfRangeError otherwise.
  std::int64_t operator[](int i) const;
  std::vector<std::int64_t> dims() const { return {span().begin(), span().end()}; }
  // The dimensions without a copy.
  std::span<const std::int64_t> span() const {
    return {rank_ <= kInlineRank ? dims_.inline_dims.data() : dims_.heap, static_cast<std::size_t>(rank_)};
  }

  // The product of the dimensions before / after `axis` (1 when there are none).
  std::int64_t outer_size(int axis) const;
  std::int64_t inner_size(int axis) const;
  // A copy with dimension `axis` replaced / removed.
  Shape with_dim(int axis, std::int64_t size) const;
  Shape without_dim(int axis) const;

  bool operator==(const Shape& other) const;
  // "(2, 3)"; compact() gives "[2,3]" for signatures such as "float32[2,3]".
  std::string to_string() const;
  std::string compact() const;

 private:
  explicit Shape(std::span<const std::int64_t> dims);
  std::int64_t* mutable_data() { return rank_ <= kInlineRank ? dims_.inline_dims.data() : dims_.heap; }
  void copy_heap_from(const Shape& other);  // rank_ > kInlineRank: a fresh copy of other's dims

  // Up to this rank the dimensions live inline and a shape is copied like a plain struct of 64
  // bytes: every tensor handle holds one, and a collective makes a handle per output leaf.
  static constexpr int kInlineRank = 6;
  int rank_ = 0;
  std::int64_t num_elements_ = 1;  // cached: every buffer's size is asked for on every collective
  union Dims {
    std::array<std::int64_t, kInlineRank> inline_dims;
    std::int64_t* heap;  // owned, rank_ entries, when rank_ > kInlineRank
  };
  Dims dims_{};
};

std::ostream& operator<<(std::ostream& os, const Shape& shape);

// Checks `axis` against `rank` for the operation `what` and returns it normalised to [0, rank):
// negative axes count from the end, as in TF. Throws InvalidArgumentError when out of range.
int normalize_axis(int axis, int rank, const char* what);

}  // namespace distribute
