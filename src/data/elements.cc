// The tensor-level work of the dataset transformations: slicing, batching, shuffling, checks.
#include "distribute/data/internal/elements.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "distribute/check.h"

namespace distribute::data::internal {

void check_at_least_one(std::int64_t value, const char* method, const char* argument) {
  DISTRIBUTE_CHECK(value >= 1, InvalidArgumentError, "Dataset::", method, ": ", argument, " is ", value,
                   "; it must be >= 1");
}

void check_count(std::int64_t count, const char* method, const char* minus_one) {
  DISTRIBUTE_CHECK(count >= -1, InvalidArgumentError, "Dataset::", method, ": count is ", count,
                   "; it must be >= 0, or -1 ", minus_one);
}

void check_shard(std::int64_t num_shards, std::int64_t index) {
  check_at_least_one(num_shards, "shard", "num_shards");
  DISTRIBUTE_CHECK(index >= 0 && index < num_shards, InvalidArgumentError, "Dataset::shard: index ", index,
                   " is not in [0, ", num_shards, ") for num_shards ", num_shards);
}

void throw_end_of_sequence(const char* method) {
  throw OutOfRangeError(absl::StrCat(method, ": End of sequence: the data has no more elements; ",
                                     "get_next_as_optional() or a range-for loop stops there instead"));
}

void throw_empty_generator(const char* problem) {
  throw InvalidArgumentError(absl::StrCat("Dataset::from_generator: ", problem,
                                          "; make_next must return a new generator for each pass"));
}

void SlicedLeaves::add(const Tensor& leaf) {
  const std::size_t index = leaves_.size();
  DISTRIBUTE_CHECK(leaf.defined(), InvalidArgumentError, "Dataset::from_tensor_slices: leaf ", index,
                   " is an undefined Tensor (default-constructed)");
  DISTRIBUTE_CHECK(leaf.rank() >= 1, InvalidArgumentError, "Dataset::from_tensor_slices: leaf ", index,
                   " has shape () (a scalar); every leaf needs a dimension 0 to slice");
  const std::int64_t rows = leaf.shape()[0];
  if (index == 0) {
    rows_ = rows;
  } else {
    DISTRIBUTE_CHECK(rows == rows_, InvalidArgumentError, "Dataset::from_tensor_slices: leaf ", index, " has ", rows,
                     " rows (shape ", leaf.shape().to_string(), ") but leaf 0 has ", rows_, " (shape ",
                     leaves_[0].shape().to_string(), "); every leaf needs the same size in dimension 0");
  }
  leaves_.push_back(leaf);
  element_shapes_.push_back(leaf.shape().without_dim(0));
  row_bytes_.push_back(static_cast<std::size_t>(element_shapes_.back().num_elements()) * dtype_size(leaf.dtype()));
}

void SlicedLeaves::add_row_to(BatchBuilder& builder, std::int64_t row) const {
  for (std::size_t leaf = 0; leaf < leaves_.size(); ++leaf) builder.add_row(leaf, leaves_[leaf], element_shapes_[leaf], row);
}

void SlicedLeaves::prefetch_row(std::int64_t row) const {
  // The first lines of a row only: the hardware prefetcher follows a copy's stream from there.
  // Asking for every line (49 for a Fashion-MNIST image) stalled on the CPU's line-fill buffers
  // and was slower than asking for none.
  constexpr std::size_t kCacheLine = 64;
  constexpr std::size_t kLines = 4;
  for (std::size_t leaf = 0; leaf < leaves_.size(); ++leaf) {
    if (!leaves_[leaf].device().is_cpu()) continue;
    const std::size_t bytes = row_bytes_[leaf];
    const char* start = static_cast<const char*>(leaves_[leaf].raw_data()) + static_cast<std::size_t>(row) * bytes;
    for (std::size_t offset = 0; offset < std::min(bytes, kLines * kCacheLine); offset += kCacheLine) {
      __builtin_prefetch(start + offset);
    }
  }
}

void SlicedLeaves::throw_no_leaves(const std::string& structure) {
  throw InvalidArgumentError(absl::StrCat("Dataset::from_tensor_slices: tensors holds no Tensor (", structure,
                                          "); it needs at least one to slice"));
}

void BatchBuilder::check_host(std::size_t leaf, const Tensor& value) const {
  DISTRIBUTE_CHECK(value.device().is_cpu(), InvalidArgumentError, "Dataset::batch: leaf ", leaf, " of element ", rows_,
                   " of a batch is on ", value.device().short_name(),
                   "; batch() stacks host tensors, so batch before moving elements to a device");
}

void BatchBuilder::start_leaf(DType dtype, const Shape& element_shape) {
  const std::size_t row_bytes = static_cast<std::size_t>(element_shape.num_elements()) * dtype_size(dtype);
  std::int64_t capacity = batch_size_;
  if (!filled_once_ && row_bytes != 0) {
    capacity = std::min<std::int64_t>(batch_size_, std::max<std::int64_t>(1, kFirstBytes / row_bytes));
  }
  std::vector<std::int64_t> dims{capacity};
  for (std::int64_t d : element_shape.span()) dims.push_back(d);
  outputs_.push_back(Tensor::empty(dtype, Shape(std::move(dims)), Device::cpu()));
  shapes_.push_back(element_shape);
  row_bytes_.push_back(row_bytes);
}

void BatchBuilder::grow(std::size_t leaf) {
  Tensor& out = outputs_[leaf];
  const std::int64_t capacity = out.shape()[0];
  Tensor bigger = Tensor::empty(out.dtype(), out.shape().with_dim(0, std::min(batch_size_, 2 * capacity)),
                                Device::cpu());
  std::memcpy(bigger.raw_data(), out.raw_data(), static_cast<std::size_t>(rows_) * row_bytes_[leaf]);
  out = std::move(bigger);
}

void BatchBuilder::copy_row(std::size_t leaf, const void* data) {
  const std::size_t bytes = row_bytes_[leaf];
  if (bytes == 0) return;
  if (rows_ == outputs_[leaf].shape()[0]) [[unlikely]] grow(leaf);
  Tensor& out = outputs_[leaf];
  std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(rows_) * bytes, data, bytes);
}

void BatchBuilder::add(std::size_t leaf, const Tensor& value) {
  DISTRIBUTE_CHECK(value.defined(), InvalidArgumentError, "Dataset::batch: leaf ", leaf, " of element ", rows_,
                   " of a batch is an undefined Tensor (default-constructed)");
  check_host(leaf, value);
  if (rows_ == 0) {
    start_leaf(value.dtype(), value.shape());
  } else {
    DISTRIBUTE_CHECK(value.dtype() == outputs_[leaf].dtype() && value.shape() == shapes_[leaf], InvalidArgumentError,
                     "Dataset::batch: element ", rows_, " of a batch has leaf ", leaf, " of ",
                     dtype_name(value.dtype()), " shape ", value.shape().to_string(), " but element 0 has ",
                     dtype_name(outputs_[leaf].dtype()), " shape ", shapes_[leaf].to_string(),
                     "; every element of a batch needs the same dtype and shape in each leaf");
  }
  copy_row(leaf, value.raw_data());
}

void BatchBuilder::add_row(std::size_t leaf, const Tensor& source, const Shape& element_shape, std::int64_t row) {
  if (rows_ == 0) {
    check_host(leaf, source);
    start_leaf(source.dtype(), element_shape);
  }
  copy_row(leaf, static_cast<const char*>(source.raw_data()) + static_cast<std::size_t>(row) * row_bytes_[leaf]);
}

void BatchBuilder::throw_structure_mismatch(const std::string& structure, const std::string& first) const {
  throw InvalidArgumentError(absl::StrCat("Dataset::batch: element ", rows_, " of a batch has structure ", structure,
                                          " but element 0 has ", first,
                                          "; every element of a batch needs the same structure"));
}

void BatchBuilder::reset() {
  filled_once_ = filled_once_ || full();
  rows_ = 0;
  outputs_.clear();
  shapes_.clear();
  row_bytes_.clear();
}

ShuffleRng::ShuffleRng(std::uint64_t seed, std::uint64_t epoch) {
  std::seed_seq sequence{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                         static_cast<std::uint32_t>(epoch), static_cast<std::uint32_t>(epoch >> 32)};
  engine_.seed(sequence);
}

std::size_t ShuffleRng::below(std::size_t n) {
  // Rejects the lowest 2^64 mod n draws, so that every remainder is equally likely.
  const std::uint64_t bound = n;
  const std::uint64_t rejected = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t x = engine_();
    if (x >= rejected) return static_cast<std::size_t>(x % bound);
  }
}

}  // namespace distribute::data::internal
