// distribute::detail, not API: many tensors viewing parts of one block of storage (the outputs of
// one collective, carved from one block) for the price of one reference-count update: the
// references are taken together up front, and those not handed out are given back when the maker
// goes. A gradient list of a hundred tensors is rebuilt from one block on every step.
#pragma once

#include <cstddef>

#include "distribute/device/tensor.h"

namespace distribute::detail {

class TensorViews {
 public:
  TensorViews(const StorageRef& storage, std::size_t count);
  TensorViews(const TensorViews&) = delete;
  TensorViews& operator=(const TensorViews&) = delete;
  ~TensorViews();

  // The view of `shape` elements of `dtype` from byte `offset` on; at most `count` calls.
  Tensor make(std::size_t offset, DType dtype, const Shape& shape) {
    --left_;
    return Tensor(StorageRef::adopt(storage_), base_ + offset, dtype, shape);
  }

 private:
  Storage* storage_;
  char* base_;
  std::size_t left_;
};

}  // namespace distribute::detail
