// The umbrella header of distribute: tf.distribute's programming model for C++.
// Layers, bottom up: device (dtypes, shapes, devices, tensors, ReduceOp) -> nest -> values, and
// device -> collective (moving buffers between replicas) -> replica (synchronising replicas:
// contexts, calls, fingerprints, merge_call) -> strategy -> variables (variables, optimizers,
// checkpoints, losses). Beside them, device and nest -> data (datasets), and data, values and
// replica -> input (distributed datasets), which the strategy's input methods return.
// Nothing reachable from here includes CUDA, NCCL or MPI headers.
#pragma once

#include "distribute/check.h"
#include "distribute/checkpoint/checkpoint.h"
#include "distribute/checkpoint/checkpoint_manager.h"
#include "distribute/checkpoint/preemption.h"
#include "distribute/cluster/cluster_resolver.h"
#include "distribute/collective/communication_options.h"
#include "distribute/data/dataset.h"
#include "distribute/device/device.h"
#include "distribute/device/dtype.h"
#include "distribute/device/gpu.h"
#include "distribute/device/reduce_op.h"
#include "distribute/device/shape.h"
#include "distribute/device/tensor.h"
#include "distribute/errors.h"
#include "distribute/fwd.h"
#include "distribute/input/distributed_dataset.h"
#include "distribute/input/input_options.h"
#include "distribute/nest/nest.h"
#include "distribute/nn/losses.h"
#include "distribute/optimizers/adam.h"
#include "distribute/optimizers/optimizer.h"
#include "distribute/optimizers/sgd.h"
#include "distribute/replica/replica_context.h"
#include "distribute/strategy/context.h"
#include "distribute/strategy/default_strategy.h"
#include "distribute/strategy/mirrored_strategy.h"
#include "distribute/strategy/one_device_strategy.h"
#include "distribute/strategy/strategy.h"
#include "distribute/strategy/strategy_extended.h"
#include "distribute/timeline.h"
#include "distribute/values/distributed_values.h"
#include "distribute/values/value_context.h"
#include "distribute/variables/variable.h"
#include "distribute/version.h"

// The multi-worker strategy and the MPI backend's resolver where they were built; otherwise names
// that say so when used.
#include "distribute/config.h"
#if DISTRIBUTE_HAS_MULTI_WORKER
#include "distribute/strategy/multi_worker_mirrored_strategy.h"
#endif
#if DISTRIBUTE_HAS_MPI
#include "distribute/mpi/multi_worker_mirrored_strategy.h"
#else
#include "distribute/mpi/unavailable.h"
#endif
