// data::internal: the tensor-level work of the dataset transformations, written once for every
// element type: the dataset templates walk an element's leaves (nest::for_each_leaf) and hand each
// leaf here by its index. Also the argument checks, so that their messages live in one place.
// Batches of from_tensor_slices rows are copied from the sliced leaves directly (add_row): making
// a view per row and leaf costs atomic reference-count updates, each of which waits for the
// previous row's copy to drain, and halved an epoch's throughput.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "distribute/device/shape.h"
#include "distribute/device/tensor.h"

namespace distribute::data::internal {

// InvalidArgumentError unless value >= 1: "Dataset::batch: batch_size is 0; it must be >= 1".
void check_at_least_one(std::int64_t value, const char* method, const char* argument);
// InvalidArgumentError unless count >= -1 (take, skip, repeat); `minus_one` says what -1 means.
void check_count(std::int64_t count, const char* method, const char* minus_one);
// InvalidArgumentError unless num_shards >= 1 and 0 <= index < num_shards.
void check_shard(std::int64_t num_shards, std::int64_t index);
// OutOfRangeError, as get_next reports the end of the data: "<method>: End of sequence ...".
[[noreturn]] void throw_end_of_sequence(const char* method);
// InvalidArgumentError: from_generator's make_next is empty, or returned an empty function;
// `problem` says which.
[[noreturn]] void throw_empty_generator(const char* problem);

// Stacks the elements of one batch, leaf by leaf, into new host tensors of up to batch_size rows.
// Row 0 fixes each leaf's dtype and shape; later rows must match them. The data may end before a
// batch fills, and batch_size may be far more than memory holds (batch(1 << 60) of a short
// dataset is one batch of all of it), so a leaf is allocated for the rows there are: at most
// kFirstBytes at first, then twice as many rows each time they run out. Once a batch has filled,
// the data can fill one, and later batches are allocated whole from their first row.
class BatchBuilder {
 public:
  explicit BatchBuilder(std::int64_t batch_size) : batch_size_(batch_size) {}

  std::int64_t rows() const { return rows_; }
  bool full() const { return rows_ == batch_size_; }
  // Whether the rows gathered make a batch: any row, and all of them when drop_remainder.
  bool has_batch(bool drop_remainder) const { return rows_ != 0 && (full() || !drop_remainder); }
  // Copies leaf `leaf` of the element in row rows() into the batch. InvalidArgumentError for a
  // leaf that is undefined, not in host memory, or differs in dtype or shape from row 0's.
  void add(std::size_t leaf, const Tensor& value);
  // Copies row `row` of `source`, whose rows have shape element_shape, as leaf `leaf` of the
  // element in row rows(): a row of from_tensor_slices, read where it is, with no element tensor
  // made for it (its dtype and shape are the same in every row). InvalidArgumentError for a
  // source that is not in host memory.
  void add_row(std::size_t leaf, const Tensor& source, const Shape& element_shape, std::int64_t row);
  // Every leaf of the element in row rows() has been added.
  void end_element() { ++rows_; }
  // InvalidArgumentError: the element in row rows() has another structure than row 0's.
  [[noreturn]] void throw_structure_mismatch(const std::string& structure, const std::string& first) const;
  // The stacked leaf, trimmed to rows() rows (a view, for the last partial batch).
  Tensor result(std::size_t leaf) const { return outputs_[leaf].slice(0, rows_); }
  // Starts the next batch.
  void reset();

 private:
  // Batches of up to this many bytes per leaf are allocated whole from their first row.
  static constexpr std::size_t kFirstBytes = std::size_t{1} << 20;

  void check_host(std::size_t leaf, const Tensor& value) const;
  // Row 0 of a leaf: makes its stacked tensor.
  void start_leaf(DType dtype, const Shape& element_shape);
  // Makes room for row rows() in a leaf whose stacked tensor is full.
  void grow(std::size_t leaf);
  void copy_row(std::size_t leaf, const void* data);

  std::int64_t batch_size_;
  std::int64_t rows_ = 0;
  bool filled_once_ = false;
  // One entry per leaf, made by row 0: the stacked tensor (room for up to batch_size_ rows), row
  // 0's shape, and the bytes of one row.
  std::vector<Tensor> outputs_;
  std::vector<Shape> shapes_;
  std::vector<std::size_t> row_bytes_;
};

// The leaves given to from_tensor_slices, cut into elements: element i of a leaf is its row i
// without dimension 0, a view of the leaf's storage.
class SlicedLeaves {
 public:
  // Leaves are added in nest order. InvalidArgumentError for an undefined or rank-0 leaf and for
  // one whose dimension 0 differs from the first leaf's.
  void add(const Tensor& leaf);
  bool empty() const { return leaves_.empty(); }
  // InvalidArgumentError for an argument without leaves; `structure` describes it.
  [[noreturn]] static void throw_no_leaves(const std::string& structure);
  std::int64_t size() const { return rows_; }
  Tensor element(std::size_t leaf, std::int64_t row) const {
    return leaves_[leaf].slice(row, row + 1).reshape(element_shapes_[leaf]);
  }
  // Adds row `row` of every leaf to `builder`, as the element in its row rows().
  void add_row_to(BatchBuilder& builder, std::int64_t row) const;
  // Asks the CPU to start loading row `row` of every leaf: the row a batch copies next, whose
  // address the shuffle decides only as the row before is copied.
  void prefetch_row(std::int64_t row) const;

 private:
  std::vector<Tensor> leaves_;
  std::vector<Shape> element_shapes_;
  std::vector<std::size_t> row_bytes_;
  std::int64_t rows_ = 0;
};

// The random choices of one shuffle pass: deterministic for a seed and the pass's epoch (0 when
// the order does not change between iterations), the same on every platform.
class ShuffleRng {
 public:
  ShuffleRng(std::uint64_t seed, std::uint64_t epoch);
  // Uniform in [0, n), n >= 1.
  std::size_t below(std::size_t n);

 private:
  std::mt19937_64 engine_;
};

}  // namespace distribute::data::internal
