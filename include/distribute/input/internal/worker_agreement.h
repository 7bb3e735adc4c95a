// input::internal::WorkerAgreement: how the distributed iterators of a multi-worker strategy's
// workers agree, at each get_next, whether the step runs, so that every worker's loop runs the
// same steps when their input pipelines end at different steps (as tf.distribute's iterators
// reduce a has-data flag across the workers). Each worker's get_next sends a few bytes to every
// worker, apart from the strategy's collectives; a step runs while any worker has data, and a
// worker without gives its replicas empty batches.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "distribute/device/dtype.h"
#include "distribute/device/shape.h"

namespace distribute::cluster {
class Coordinator;  // src/cluster/coordinator.h
}  // namespace distribute::cluster

namespace distribute::input::internal {

// What one worker knows of the step its get_next asks for.
struct StepReport {
  enum class Status : std::uint8_t { kData, kEnd, kFailed };
  // How the worker would make its replicas' empty batches: modelled on an element it has seen
  // (kCan), not at all as that element has a rank-0 leaf (kScalar), or only from another worker's
  // description of the elements (kNone: it has seen none).
  enum class Empties : std::uint8_t { kCan, kScalar, kNone };

  std::int64_t step = 0;  // from 1, in this pass
  // nest::structure_hash of the worker's elements: of its model element, else of a default T.
  std::uint64_t structure = 0;
  Status status = Status::kEnd;
  bool full = false;   // kData: every local replica has an element
  bool drops = false;  // the dataset's last batch() drops its remainder
  Empties empties = Empties::kNone;
};

// A leaf of an element: its dtype and shape (dimension 0 aside).
struct LeafSpec {
  DType dtype = DType::kFloat32;
  Shape shape;
};

// What every worker decided for a step, alike on every worker.
struct StepDecision {
  bool run = false;
  // Set when the step runs and this worker, without data, has seen no element: the elements'
  // leaves, as another worker describes them.
  std::vector<LeafSpec> leaves;
};

class WorkerAgreement {
 public:
  // Each agreement waits at most `timeout` for the other workers (0: no limit).
  WorkerAgreement(std::shared_ptr<cluster::Coordinator> coordinator, std::chrono::duration<double> timeout);

  // Sends `mine` to every worker and decides from every worker's report: the step runs when
  // every worker has a full step if any worker's dataset drops its remainder, else when any
  // worker has data. `describe` gives this worker's leaves when another worker needs them (it has
  // seen no element). When this worker failed (kFailed), returns once the others know it. Throws,
  // alike on every worker: AbortedError naming the workers that failed; InvalidArgumentError
  // when the workers ask for different steps, or a worker without data cannot make empty batches;
  // DeadlineExceededError naming the workers that did not arrive within the timeout, after which
  // every agreement of this strategy throws UnavailableError.
  StepDecision agree(const StepReport& mine, absl::FunctionRef<std::vector<LeafSpec>()> describe);

 private:
  // Worker sources[w] describes its leaves to each worker w that has seen no element (-1 for the
  // others); returns the description this worker needs, if any.
  std::vector<LeafSpec> exchange_leaves(const std::vector<int>& sources,
                                        absl::FunctionRef<std::vector<LeafSpec>()> describe, std::int64_t step);
  // Throws DeadlineExceededError naming the `missing` workers of step `step`, unless none is.
  void check_arrived(const std::vector<int>& missing, std::int64_t step);

  const std::shared_ptr<cluster::Coordinator> coordinator_;
  const std::chrono::duration<double> timeout_;
  std::atomic<bool> broken_{false};
  std::string broken_reason_;  // written once, before broken_ is set
};

}  // namespace distribute::input::internal
