// Shape: the dimensions of a dense tensor. Shape{} is a scalar (rank 0); Shape{2, 3} a 2x3 matrix.
// Prints like TF: "()", "(6,)", "(2, 3)".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <array>
#include <span>
#include <vector>

namespace distribute {

class Shape {
 public:
  Shape() = default;
  // Throws InvalidArgumentError if a dimension is negative.
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::vector<std::int64_t> dims);

  int rank() const { return rank_; }
  std::int64_t num_elements() const { return num_elements_; }
  // Dimension i, 0 <= i < rank(); negative i counts from the end. Throws OutOfRangeError otherwise.
  std::int64_t operator[](int i) const;
  std::vector<std::int64_t> dims() const { return {span().begin(), span().end()}; }
  // The dimensions without a copy.
  std::span<const std::int64_t> span() const {
    return {rank_ <= kInlineRank ? inline_.data() : heap_.data(), static_cast<std::size_t>(rank_)};
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
  std::int64_t* mutable_data() { return rank_ <= kInlineRank ? inline_.data() : heap_.data(); }

  // Up to this rank the dimensions live inline, so copying a shape (every tensor handle holds
  // one) allocates nothing.
  static constexpr int kInlineRank = 6;
  int rank_ = 0;
  std::int64_t num_elements_ = 1;  // cached: every buffer's size is asked for on every collective
  std::array<std::int64_t, kInlineRank> inline_{};
  std::vector<std::int64_t> heap_;  // the dimensions when rank_ > kInlineRank
};

std::ostream& operator<<(std::ostream& os, const Shape& shape);

// Checks `axis` against `rank` for the operation `what` and returns it normalised to [0, rank):
// negative axes count from the end, as in TF. Throws InvalidArgumentError when out of range.
int normalize_axis(int axis, int rank, const char* what);

}  // namespace distribute
