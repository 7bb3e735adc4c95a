// distribute: Saveable, what a Checkpoint holds under one name: a Variable, or state an object keeps
// another way (an optimizer's slots in shards across the replicas, optimizers/optimizer.h) that it
// can read whole and write whole in cross-replica context. A checkpoint file does not tell them
// apart, so state saved one way restores the other.
#pragma once

#include <functional>
#include <utility>

#include "distribute/device/tensor.h"
#include "distribute/variables/variable.h"

namespace distribute {

class Saveable {
 public:
  // A variable: read is its value() (an ON_READ variable's aggregate), write its assign().
  Saveable(Variable variable)  // implicit: a variable is a saveable as it is
      : dtype_(variable.dtype()),
        shape_(variable.shape()),
        read_([variable] { return variable.value(); }),
        write_([variable](const Tensor& value) mutable { variable.assign(value); }) {}
  // State of `dtype` and `shape`: `read` returns its whole value (on any device), `write` sets it
  // from a host tensor of that dtype and shape.
  Saveable(DType dtype, Shape shape, std::function<Tensor()> read, std::function<void(const Tensor&)> write)
      : dtype_(dtype), shape_(std::move(shape)), read_(std::move(read)), write_(std::move(write)) {}

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  Tensor read() const { return read_(); }
  void write(const Tensor& value) const { write_(value); }

 private:
  DType dtype_;
  Shape shape_;
  std::function<Tensor()> read_;
  std::function<void(const Tensor&)> write_;
};

}  // namespace distribute
