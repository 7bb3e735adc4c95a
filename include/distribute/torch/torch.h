// The distribute::torch component: LibTorch models under this library's strategies. Link
// distribute::torch (find_package(distribute CONFIG REQUIRED COMPONENTS torch)); it is built where
// CMake finds LibTorch (Debian: libtorch-dev). The core library never depends on LibTorch.
#pragma once

#include "distribute/torch/tensor_interop.h"
