// The MLP's passes when a replica's batch is on a GPU (model.cc sends it here): the same
// contracts as forward_backward and count_correct in model.h. Built with the CUDA backend only.
#pragma once

#include <cstdint>

#include "model.h"

namespace fashion_mnist {

distribute::Tensor forward_backward_on_gpu(const Mlp& model, const distribute::Tensor& images,
                                           const distribute::Tensor& labels, std::int64_t global_batch_size,
                                           Workspace& workspace, const GradientSink& on_gradient);

std::int64_t count_correct_on_gpu(const Mlp& model, const distribute::Tensor& images, const distribute::Tensor& labels,
                                  Workspace& workspace);

}  // namespace fashion_mnist
