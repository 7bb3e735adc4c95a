// distribute::detail::gpu: what the rest of the library asks of the CUDA runtime. Implemented in
// cuda/runtime.cc when the build has CUDA and in no_gpu_runtime.cc otherwise (where nothing is
// visible and every allocation or copy on a GPU throws UnimplementedError), so callers never test
// the build themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "device/storage.h"
#include "distribute/device/dtype.h"
#include "distribute/device/reduce_op.h"

namespace distribute::detail::gpu {

// Whether this build has the CUDA backend.
bool built();
// Physical GPUs visible (0 when CUDA, its driver or a GPU is missing).
int physical_device_count();
// Why physical_device_count() is 0; "" when it is not.
std::string unavailable_reason();
// The PCI bus id of a physical GPU ("0000:19:00.0"), which names it alike in every process of
// the host whatever CUDA_VISIBLE_DEVICES each sees.
std::string pci_bus_id(int physical);

// Device memory from the physical GPU's stream-ordered pool, on the calling replica's stream (the
// legacy default stream elsewhere); freed on the same stream. Counts against the logical GPU's
// memory_limit.
StorageRef allocate(const Device& gpu, std::size_t nbytes);
// A copy where at least one side is a GPU, ordered on the calling thread's stream; returns once
// the data is readable by the host when the destination is host memory.
void copy(void* dst, const Device& dst_device, const void* src, const Device& src_device, std::size_t nbytes);
void fill_zero(void* data, const Device& gpu, std::size_t nbytes);
// out = op over inputs (all readable on `gpu`'s physical GPU), as reduce_buffers, with the device's
// kernel; ordered like copy(), and complete on return unless issued on the calling replica's stream.
void reduce(DType dtype, ReduceOp op, std::span<const void* const> inputs, void* out, std::int64_t count,
            std::int64_t mean_denominator, const Device& gpu);
// dst -= src, `count` elements of `dtype` on `gpu`; ordered like reduce().
void subtract(DType dtype, void* dst, const void* src, std::int64_t count, const Device& gpu);
// The optimizers' steps on float32 or float64 buffers on `gpu` (formulas in cuda/update_kernels.h:
// no momentum slot when `m` is null); ordered like reduce().
void sgd_step(DType dtype, void* w, const void* g, void* m, std::int64_t count, double learning_rate, double momentum,
              bool nesterov, const Device& gpu);
// Adam reads its step number from `steps_before`, the optimizer's step count in `gpu`'s memory.
void adam_step(DType dtype, void* w, const void* g, void* m, void* v, std::int64_t count,
               const std::int64_t* steps_before, double learning_rate, double beta_1, double beta_2, double epsilon,
               const Device& gpu);
// *counter += 1 for an int64 in `gpu`'s memory; ordered like reduce().
void increment(std::int64_t* counter, const Device& gpu);
// Waits for the calling replica thread's stream to drain; nothing on other threads.
void synchronize_bound_stream();

}  // namespace distribute::detail::gpu
