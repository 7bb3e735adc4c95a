// The checkpoint layer's side of a multi-worker job: the chief (worker 0) alone reads and writes
// the files, and what it found (how its part ended, a number, the values it read) reaches every
// other worker through the strategy's broadcast. So every worker returns or throws alike, and
// workers on other hosts need no copy of the checkpoint directory. With one worker every function
// here is the chief's part alone.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "distribute/strategy/strategy_extended.h"
#include "distribute/variables/saveable.h"
#include "distribute/variables/variable.h"

namespace distribute::detail {

// The strategy whose workers take part in operations on these variables: that of the first
// variable, when it has more than one worker; null otherwise (each process on its own).
StrategyExtended* multi_worker_strategy_of(const std::vector<std::pair<std::string, Variable>>& variables);

inline bool is_chief(const StrategyExtended* workers) { return workers == nullptr || workers->worker_id() == 0; }

// Runs `part` on the chief, then tells every worker how it ended: where it threw, the chief
// rethrows its exception and every other worker throws one of the same distribute::Error type and
// message (an exception of another type becomes an InternalError there).
void on_chief(StrategyExtended* workers, absl::FunctionRef<void()> part);

// The chief's `bytes` on every worker (the argument is ignored elsewhere).
std::string chief_bytes(StrategyExtended* workers, std::string bytes);

// Agrees with the other workers, before anything is read, written or sent, that every worker calls
// the checkpoint operation `what` ("Checkpoint::save", "CheckpointManager::save", ...) on the
// same `entries`: otherwise every worker throws the same InvalidArgumentError naming the workers
// and their calls (FailedPreconditionError where a worker makes another kind of call). Nothing
// with one worker.
void agree_on_operation(StrategyExtended* workers, const char* what,
                        const std::vector<std::pair<std::string, Saveable>>& entries);

}  // namespace distribute::detail
