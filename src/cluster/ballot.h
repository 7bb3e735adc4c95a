// distribute::cluster::Ballot: one worker's part in the vote that precedes every step across the
// workers, as the layer that takes the step (the replica layer's collectives, the strategy's
// cross-replica steps, checkpoints) describes it. The coordinator (coordinator.h) compares only
// the fixed-size header a ballot gives; when the workers' headers differ it exchanges their
// descriptions and asks the ballot what differed. So the cluster layer moves and compares the
// words of a vote without knowing what a collective call is.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"

namespace distribute::cluster {

class Ballot {
 public:
  // What this worker brings to the step. kLeft: it destroyed its strategy (sent by the
  // coordinator's destructor, never in a ballot).
  enum class Status : std::uint32_t { kCall, kReturned, kFailed, kLeft };

  virtual ~Ballot() = default;

  Status status = Status::kCall;
  // The step's kind, its sequence among the workers' steps and the digest of its signature: equal
  // on every worker means the same call.
  std::uint16_t kind = 0;
  std::int64_t sequence = 0;
  std::uint64_t signature = 0;
  // A call queued behind this one (an async collective issued and not yet begun): its kind and
  // the digest of its signature. With kCall, a ballot may offer the calls queued behind its own,
  // in order: the workers then also agree on the first ones that every worker offers alike, and
  // take those steps without voting again.
  struct Ahead {
    std::uint64_t signature = 0;
    std::uint16_t kind = 0;
    bool operator==(const Ahead&) const = default;
  };
  std::span<const Ahead> ahead;
  // How long the vote waits for the other workers.
  std::chrono::duration<double> timeout{0};
  // kFailed: the error, and the global id of the replica that raised it (-1: none in particular).
  std::exception_ptr error;
  int failed_replica = -1;

  // The step in messages: "all_reduce #3".
  virtual std::string name() const = 0;
  // The call rendered for the other workers, exchanged only when the headers differ.
  virtual std::string describe() const = 0;
  // Given every worker's description (described[w] is worker w's, no worker failed) and how
  // messages name workers, the error that says which workers' calls differ and how; null when the
  // descriptions show no difference.
  virtual std::exception_ptr disagreement(const std::vector<std::string>& described,
                                          absl::FunctionRef<std::string(const std::vector<int>&)> name_workers) const = 0;
};

}  // namespace distribute::cluster
