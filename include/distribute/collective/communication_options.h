// CommunicationOptions: hints and limits for one collective (tf.distribute.experimental.
// CommunicationOptions). A strategy holds defaults; options passed to a call override them field by
// field where the call's field is set (non-zero / not kAuto). A timeout that is negative, NaN or
// infinite is an InvalidArgumentError where the options reach the library: when a strategy is
// built with them, and when a collective or extended() operation is given them.
#pragma once

#include <chrono>
#include <cstddef>
#include <ostream>
#include <string_view>

namespace distribute {

// Which backend moves a collective's data. A strategy has one backend, chosen when it is built:
// kRing through host memory (shared memory between CPU replicas), kNccl through NCCL (GPU
// replicas), kAuto the strategy's choice. Given in a strategy's options, it chooses the backend;
// given to one collective, it must be kAuto or the strategy's own (InvalidArgumentError otherwise),
// since a collective cannot change backend. Strategies with one replica move no data and ignore it.
enum class CommunicationImplementation { kAuto, kRing, kNccl };

// How float32 values of an all_reduce or reduce_scatter cross the links between processes (the
// ring between workers). kBfloat16 and kFloat16 send each value in 16 bits, rounded to nearest
// even, and add what arrives in float32; the owner of each part rounds its final sum too, so every
// replica ends with the same bits. Values summed inside one process (replicas sharing its memory)
// are added in float32 exactly as without compression: nothing crosses a link there. Other dtypes
// and other collectives move unchanged. A finite value or partial sum beyond float16's range
// (|x| > 65504) is an InvalidArgumentError naming the collective on every worker, never an inf.
// docs/overlap.md gives the error bound. Not offered by NCCL yet (UnimplementedError).
enum class Compression { kNone, kBfloat16, kFloat16 };

struct CommunicationOptions {
  // Upper bound on the bytes fused into one pack by backends that pack (NCCL); 0 lets the backend
  // choose. The CPU backend reduces a whole nest in one pass without packing copies.
  std::size_t bytes_per_pack = 0;
  // Bound on every wait of the collective, a finite number of seconds >= 0; 0 means no timeout
  // (in a call's options: the strategy's). On expiry the replicas get DeadlineExceededError naming
  // those that did not arrive.
  std::chrono::duration<double> timeout{0};
  CommunicationImplementation implementation = CommunicationImplementation::kAuto;
  // Given to all_reduce or reduce_scatter (or as a strategy's default, which other calls ignore);
  // kNone in a call's options takes the strategy's.
  Compression compression = Compression::kNone;

  // These options with each unset field taken from `defaults`. Every collective and cross-replica
  // operation merges its options this way: InvalidArgumentError when this timeout is invalid (the
  // defaults, a strategy's, were checked when it was built).
  CommunicationOptions merged_with(const CommunicationOptions& defaults) const;
  bool operator==(const CommunicationOptions&) const = default;
};

// "AUTO", "RING", "NCCL".
const char* implementation_name(CommunicationImplementation implementation);
std::ostream& operator<<(std::ostream& os, CommunicationImplementation implementation);
// "NONE", "BF16", "FP16".
const char* compression_name(Compression compression);
// Accepts "none", "bf16" and "fp16" in any letter case (command-line flags); throws
// InvalidArgumentError for anything else.
Compression parse_compression(std::string_view name);
std::ostream& operator<<(std::ostream& os, Compression compression);

namespace detail {
// InvalidArgumentError unless `timeout` is finite and >= 0. `field` names it in the message
// ("MirroredStrategy: options.communication.timeout"), `zero_means` what 0 stands for there.
void check_timeout(std::chrono::duration<double> timeout, const char* field, const char* zero_means);
}  // namespace detail

}  // namespace distribute
