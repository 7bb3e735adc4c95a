// ReduceOp: how all_reduce / reduce / reduce_to combine the replicas' values (tf.distribute.ReduceOp).
// MEAN divides the sum by the number of values; for integer types the division truncates.
#pragma once

#include <ostream>
#include <string_view>

namespace distribute {

enum class ReduceOp { kSum, kMean };

// Accepts "sum" and "mean" in any letter case; throws InvalidArgumentError for anything else.
ReduceOp parse_reduce_op(std::string_view name);
// "SUM" or "MEAN", as TF spells the enum values.
const char* reduce_op_name(ReduceOp op);
std::ostream& operator<<(std::ostream& os, ReduceOp op);

}  // namespace distribute
