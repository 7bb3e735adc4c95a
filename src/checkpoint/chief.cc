// The chief's part of a checkpoint operation, and its outcome broadcast to the other workers.
#include "checkpoint/chief.h"

#include <cstdint>
#include <cstring>
#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "distribute/errors.h"
#include "distribute/replica/internal/collective_call.h"
#include "strategy/cross_worker.h"

namespace distribute::detail {

StrategyExtended* multi_worker_strategy_of(const std::vector<std::pair<std::string, Variable>>& variables) {
  if (variables.empty()) return nullptr;
  StrategyExtended& extended = variables.front().second.distribute_strategy().extended();
  return extended.in_multi_worker_mode() ? &extended : nullptr;
}

std::string chief_bytes(StrategyExtended* workers, std::string bytes) {
  if (workers == nullptr) return bytes;
  return broadcast_from_chief(*workers, std::move(bytes));
}

void agree_on_operation(StrategyExtended* workers, const char* what,
                        const std::vector<std::pair<std::string, Saveable>>& entries) {
  if (workers == nullptr) return;
  std::vector<VariableKey> keys;
  keys.reserve(entries.size());
  for (const auto& [name, entry] : entries) {
    keys.push_back({fixed_hash(name), &name, static_cast<std::uint64_t>(keys.size())});
  }
  agree_on_checkpoint(*workers, CallPurpose(what, keys));
}

void on_chief(StrategyExtended* workers, absl::FunctionRef<void()> part) {
  if (workers == nullptr) return part();
  std::exception_ptr error;
  if (is_chief(workers)) {
    try {
      part();
    } catch (...) {
      error = std::current_exception();
    }
  }
  broadcast_outcome_from_chief(*workers, error);
}

}  // namespace distribute::detail
