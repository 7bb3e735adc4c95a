// distribute::detail, not API: one replica's part in one collective or merge_call, as the replica
// layer synchronises it. The buffers (collective::CollectiveOp) go to the backend; the rest is
// what the call's signature is made of (src/replica/call_signature.h: kind, what it was issued
// for, op, nest structure, dtypes and shapes, options, merge_fn's type), which the replicas and
// workers compare before any data moves, and what merge_call needs to run merge_fn once for every
// replica.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>

#include "absl/functional/function_ref.h"
#include "distribute/collective/internal/collective_op.h"

namespace distribute::detail {

// Builds CollectiveCall::leaf_digest from the leaves in order. Each leaf is a word holding its
// dtype, its rank and, for all_gather, the gather axis (so that no leaf's dimensions can read as
// the start of another leaf), then its dimensions (all_gather: the gather axis's size left out,
// as the replicas may differ there). Leaf k goes into lane k % 4, so that a hundred leaves make
// four short chains of dependent multiplications rather than one long one; the lanes, folded
// together and mixed to full avalanche, make the digest. Equal leaves give equal digests;
// different leaves give equal digests only by a collision of 64-bit hashes, as for a nest's
// structure_hash.
class LeafDigest {
 public:
  void add(DType dtype, std::span<const std::int64_t> dims, int gather_axis) {
    std::uint64_t& lane = lanes_[leaves_++ % kLanes];
    lane = mix(lane, static_cast<std::uint64_t>(dtype) | std::uint64_t{dims.size()} << 8 |
                         static_cast<std::uint64_t>(gather_axis + 1) << 40);
    for (std::size_t d = 0; d < dims.size(); ++d) {
      lane = mix(lane, static_cast<int>(d) == gather_axis ? 0 : static_cast<std::uint64_t>(dims[d]));
    }
  }
  // The lanes in use folded in one after the other, then one avalanche: for a fixed set of other
  // lanes each fold is a bijection of the lane, so a difference in any one leaf always shows, and
  // a call of one leaf (a loss, a metric) pays one fold and one avalanche.
  std::uint64_t value() const {
    std::uint64_t h = leaves_;
    const std::uint64_t used = leaves_ < kLanes ? leaves_ : kLanes;
    for (std::uint64_t lane = 0; lane < used; ++lane) h = mix(h, lanes_[lane]);
    return avalanche(h);
  }

 private:
  static constexpr std::size_t kLanes = 4;
  static constexpr std::uint64_t kMultiplier = 0x9e3779b97f4a7c15;  // odd: a bijection mod 2^64
  // One word into a lane: the multiplication spreads each bit upwards, the shift brings the high
  // half back down, so a difference anywhere in a word reaches every later bit.
  static std::uint64_t mix(std::uint64_t lane, std::uint64_t word) {
    const std::uint64_t h = (lane ^ word) * kMultiplier;
    return h ^ (h >> 32);
  }
  // SplitMix64's finaliser: every input bit flips each output bit with probability about 1/2.
  static std::uint64_t avalanche(std::uint64_t h) {
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9;
    h = (h ^ (h >> 27)) * 0x94d049bb133111eb;
    return h ^ (h >> 31);
  }
  std::uint64_t lanes_[kLanes] = {0x243f6a8885a308d3, 0x13198a2e03707344, 0xa4093822299f31d0, 0x082efa98ec4e6c89};
  std::uint64_t leaves_ = 0;
};

// FNV-1a over `bytes`: a hash that is the same in every process and build of one program, for
// what workers compare (std::hash and std::type_info::hash_code promise neither).
constexpr std::uint64_t fixed_hash(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3;
  return h;
}

// A variable as the collectives issued on its behalf name it: `id` is the same on every replica
// and worker without communication (a hash of its name and `number`); `name` and `number` are
// for messages.
struct VariableKey {
  std::uint64_t id = 0;
  const std::string* name = nullptr;
  std::uint64_t number = 0;  // the count of its strategy's variables created before it
};

// What the library issued a collective for, when it did so on behalf of variables (an update of
// one variable, an optimizer's gradient list: one variable per leaf). It is part of the call's
// signature, so that replicas or workers that make the same collective for different variables,
// or in a different order, fail instead of adding one variable's values to another's.
struct CallPurpose {
  CallPurpose(const char* what, std::span<const VariableKey> keys) : action(what), variables(keys) {
    digest = fixed_hash(what);
    for (const VariableKey& v : keys) digest = (digest ^ v.id) * 0x9e3779b97f4a7c15 + (digest >> 29);
  }
  const char* action;  // "assign", "assign_add", "assign_sub", "apply_gradients", ...
  std::span<const VariableKey> variables;
  std::uint64_t digest;  // of the action and every variable's id, in order
};

struct CollectiveCall;

// Runs a merge_fn once for all replicas (calls[r] is replica r's call) and returns its result.
using MergeRunner = std::shared_ptr<void> (*)(std::span<CollectiveCall* const> calls);

struct CollectiveCall {
  // The digest of the call's signature (signature_digest), made on the replica's own thread when
  // it publishes the call: the replica that completes a phase compares one word per peer. First,
  // beside op.kind, so that the comparison reads no line that the phase does not read anyway.
  std::uint64_t signature = 0;
  collective::CollectiveOp op;
  // Every input leaf's dtype and shape in one LeafDigest, made on the replica's own thread while
  // it visits the leaves: the replica that completes the rendezvous compares one word per peer,
  // and no per-leaf array is written on one core to be read on another.
  std::uint64_t leaf_digest = 0;
  // The nest's structure: its hash is compared; describe_structure(value) renders it for messages.
  std::uint64_t structure_hash = 0;
  std::string (*describe_structure)(const void* value) = nullptr;
  const void* value = nullptr;
  // Set by the library when it issues the call on behalf of variables; null otherwise.
  const CallPurpose* purpose = nullptr;
  // merge_call: merge_fn's type and its arguments' types, as a fixed_hash of their name (equal
  // across processes) and for messages; `frame` is read by `run_merge`.
  std::uint64_t merge_type_hash = 0;
  const std::type_info* merge_type_info = nullptr;
  const void* frame = nullptr;
  MergeRunner run_merge = nullptr;
  // When set: work of this replica's own that needs neither the other replicas nor the data
  // (making an all_reduce's result, tensors viewing the output block), run once as soon as the
  // replica has arrived at the rendezvous, so that it fills the wait for the others. Must not
  // throw.
  std::optional<absl::FunctionRef<void()>> while_waiting;
};

}  // namespace distribute::detail
