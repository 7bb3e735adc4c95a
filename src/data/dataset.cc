// data::range: the integer datasets.
#include "distribute/data/dataset.h"

#include "distribute/check.h"

namespace distribute::data {

Dataset<Tensor> range(std::int64_t stop) { return range(0, stop, 1); }

Dataset<Tensor> range(std::int64_t start, std::int64_t stop, std::int64_t step) {
  DISTRIBUTE_CHECK(step != 0, InvalidArgumentError, "data::range: step is 0; it must not be 0");
  // The count is worked out in unsigned arithmetic, so that no bound of int64 overflows.
  const bool up = step > 0;
  const std::uint64_t distance = up ? static_cast<std::uint64_t>(stop) - static_cast<std::uint64_t>(start)
                                    : static_cast<std::uint64_t>(start) - static_cast<std::uint64_t>(stop);
  const std::uint64_t stride = up ? static_cast<std::uint64_t>(step) : 0 - static_cast<std::uint64_t>(step);
  const std::uint64_t count = (up ? start < stop : start > stop) ? distance / stride + (distance % stride != 0) : 0;
  return Dataset<Tensor>::from_generator([start, step, count] {
    return std::function<std::optional<Tensor>()>([start, step, count, i = std::uint64_t{0}]() mutable {
      if (i == count) return std::optional<Tensor>();
      const auto value = static_cast<std::int64_t>(static_cast<std::uint64_t>(start) + i++ * static_cast<std::uint64_t>(step));
      return std::optional<Tensor>(Tensor::scalar<std::int64_t>(value, Device::cpu()));
    });
  });
}

}  // namespace distribute::data
