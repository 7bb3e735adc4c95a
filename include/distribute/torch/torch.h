// The distribute::torch component: LibTorch models under this library's strategies. Link
// distribute::torch (find_package(distribute CONFIG REQUIRED COMPONENTS torch)); it is built where
// CMake finds LibTorch (Debian: libtorch-dev). The core library never depends on LibTorch.
// Tensors shared both ways (tensor_interop.h) and modules replicated per replica
// (replicated_module.h).
#pragma once

#include "distribute/torch/tensor_interop.h"
#include "distribute/torch/replicated_module.h"
