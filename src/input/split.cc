// The rows each replica takes from a batch, and the empty batches of a last, partial step.
#include "distribute/input/internal/split.h"

#include <algorithm>

#include "distribute/check.h"

namespace distribute::input::internal {

RowRange replica_rows(std::int64_t rows, std::optional<std::int64_t> batch_size, int num_replicas, int replica) {
  const std::int64_t global = std::max(rows, batch_size.value_or(rows));
  const std::int64_t base = global / num_replicas;
  const std::int64_t extra = global % num_replicas;
  const std::int64_t begin = replica * base + std::min<std::int64_t>(replica, extra);
  const std::int64_t size = base + (replica < extra ? 1 : 0);
  return {std::min(begin, rows), std::min(begin + size, rows)};
}

std::int64_t split_rows(const Tensor& leaf, std::size_t index, std::int64_t leaf0_rows, int num_replicas) {
  DISTRIBUTE_CHECK(leaf.defined(), InvalidArgumentError, "experimental_distribute_dataset: leaf ", index,
                   " of an element is an undefined Tensor (default-constructed)");
  DISTRIBUTE_CHECK(leaf.rank() >= 1, InvalidArgumentError, "experimental_distribute_dataset: leaf ", index,
                   " of an element has shape () (a scalar); splitting it between ", num_replicas,
                   " replicas needs a dimension 0: batch the dataset");
  const std::int64_t rows = leaf.shape()[0];
  DISTRIBUTE_CHECK(index == 0 || rows == leaf0_rows, InvalidArgumentError, "experimental_distribute_dataset: leaf ",
                   index, " of an element has ", rows, " rows (shape ", leaf.shape().to_string(), ") but leaf 0 has ",
                   leaf0_rows, "; every leaf of a batch needs the same size in dimension 0");
  return rows;
}

Tensor empty_batch_like(const Tensor& leaf, std::size_t index, int replica) {
  DISTRIBUTE_CHECK(leaf.rank() >= 1, InvalidArgumentError, "distribute_datasets_from_function: replica ", replica,
                   " has no element in the last step, and leaf ", index,
                   " of the step's first element has shape () (a scalar); an empty batch needs a dimension 0: "
                   "batch the dataset, or batch it with drop_remainder to drop the last step");
  return leaf.slice(0, 0);
}

}  // namespace distribute::input::internal
