// distribute::detail: a call's signature, the one description of what the parties of a collective
// (the replicas of a process, the workers of a job) must agree on before any data moves. Its
// fields, in order: the kind (all_reduce, merge_call, a replica's return, ...), the variables it
// was issued for (CallPurpose), the reduce op or gather axis or merge_fn's type, the nest
// structure, each leaf's dtype and shape, and the options.
//
// It has three forms, all made here:
//   - a digest, one word made on the caller's thread (signature_digest): equal calls give equal
//     digests, in every process of one program, so the in-process check, the small all_reduce's
//     line and the header the workers exchange all compare one word;
//   - a rendering, each field as text (render_signature), made only when digests differ, and
//     serialised for the workers to exchange;
//   - the disagreement: find_disagreement takes every party's rendering and builds the one error
//     that names the parties and the first field that differs, e.g.
//       all_reduce #3: replica 1 passed float32[10], replica 0 passed float32[12]; ...
//       replica 2 called all_gather where replicas 0, 1, 3 called all_reduce (collective #5). ...
//       all_reduce #1: replica 0 called assign_add of 'a' where replica 1 called assign_add of 'b'; ...
#pragma once

#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "cluster/ballot.h"
#include "distribute/replica/internal/collective_call.h"

namespace distribute::detail {

// Every field of `call` in one word. A fixed function of the fields' values (no addresses, no
// per-process hashes): workers running one program get the same word for the same call.
std::uint64_t signature_digest(const CollectiveCall& call);

struct SignatureField {
  // Says how a difference reads and which error it is.
  enum class Kind : std::uint8_t { kPurpose, kOperation, kMergeFunction, kStructure, kLeaf, kOptions };
  Kind kind = Kind::kOperation;
  std::string id;     // which field: parties' fields with one id are compared ("leaf 2", "op", ...)
  std::string where;  // after the call's name in a message: " (leaf 2)" or ""
  std::string key;    // what must be equal
  std::string shown;  // what a message prints for it ("" = key): all_gather's key leaves its axis open
  std::string hint;   // appended to the message, e.g. "; all_reduce needs the same dtype and shape ..."
};

struct RenderedSignature {
  std::string kind;  // collective::kind_name
  std::int64_t sequence = 0;
  std::string purpose;  // "" or, e.g., "assign of 'a'": said beside the kind in messages
  std::vector<SignatureField> fields;

  std::string name() const;  // "all_reduce #3"
  std::string serialize() const;
  static RenderedSignature deserialize(std::string_view bytes);
};

RenderedSignature render_signature(const CollectiveCall& call);

// Who the parties are in messages.
struct Parties {
  // "replica 1", "replicas 0, 2" / "worker 1 (replicas 2, 3)", from the parties' indices.
  absl::FunctionRef<std::string(const std::vector<int>&)> name;
  const char* noun;  // "replica" or "worker"
  // Replaces the fields' own hints of passed values, where set.
  const char* value_hint = nullptr;
};

// The error to raise on every party when the renderings differ (InvalidArgumentError for
// different values, FailedPreconditionError for different calls), else null.
std::exception_ptr find_disagreement(std::span<const RenderedSignature> calls, const Parties& parties);

// The in-process check: null when every replica's call has the same signature, else the error.
// calls[r] is the call of the replica with global id first_id + r, as messages name it.
std::exception_ptr compare_calls(std::span<CollectiveCall* const> calls, int first_id = 0);

// "all_reduce #3".
std::string call_name(const CollectiveCall& call);

// A call as this worker's ballot in the workers' vote before a step (cluster/ballot.h): the
// header is the call's kind, sequence and digest, the description its rendering, and the
// workers' renderings are compared as the replicas' are. A kReturned or kFailed ballot carries a
// return call. Refers to `call`, which outlives it.
class CallBallot final : public cluster::Ballot {
 public:
  CallBallot(Status what, const CollectiveCall& call, std::exception_ptr failure = nullptr, int failing_replica = -1);
  std::string name() const override { return call_name(call_); }
  std::string describe() const override { return render_signature(call_).serialize(); }
  std::exception_ptr disagreement(const std::vector<std::string>& described,
                                  absl::FunctionRef<std::string(const std::vector<int>&)> name_workers) const override;

 private:
  const CollectiveCall& call_;
};

}  // namespace distribute::detail
