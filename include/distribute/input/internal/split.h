// input::internal: how elements become per-replica batches. experimental_distribute_dataset cuts
// each element's dimension 0 into consecutive row ranges, one per replica, sized from the
// dataset's batch size; distribute_datasets_from_function gives a replica left without an element
// an empty batch. Both make views, never copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "distribute/device/tensor.h"

namespace distribute::input::internal {

struct RowRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

// The rows of a batch of `rows` rows that `replica` of num_replicas takes. With G = the declared
// batch size (batch_size, or `rows` when there is none or it is smaller than `rows`), replica r
// may take G / N rows, the first G % N replicas one more; a batch is filled in replica order, so
// a partial batch leaves the later replicas fewer rows, or none.
RowRange replica_rows(std::int64_t rows, std::optional<std::int64_t> batch_size, int num_replicas, int replica);

// The size of dimension 0 of leaf `index` of an element to split between num_replicas replicas.
// InvalidArgumentError for an undefined or rank-0 leaf, and for a leaf whose dimension 0 differs
// from leaf 0's (`leaf0_rows`, ignored for leaf 0).
std::int64_t split_rows(const Tensor& leaf, std::size_t index, std::int64_t leaf0_rows, int num_replicas);

// The empty batch that `replica`, left without an element in the last step, gets in place of a
// leaf like `leaf` (leaf `index` of the step's first element): 0 rows, the same trailing shape and
// dtype. InvalidArgumentError for a rank-0 leaf, which has no rows to leave out.
Tensor empty_batch_like(const Tensor& leaf, std::size_t index, int replica);

}  // namespace distribute::input::internal
