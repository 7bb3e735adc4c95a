// The chief's part of a checkpoint operation, and its outcome broadcast to the other workers.
#include "checkpoint/chief.h"

#include <cstdint>
#include <cstring>
#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "distribute/errors.h"
#include "distribute/replica/internal/collective_call.h"

namespace distribute::detail {

StrategyExtended* workers_of(const std::vector<std::pair<std::string, Variable>>& variables) {
  if (variables.empty()) return nullptr;
  StrategyExtended& extended = variables.front().second.distribute_strategy().extended();
  return extended.in_multi_worker_mode() ? &extended : nullptr;
}

std::string chief_bytes(StrategyExtended* workers, std::string bytes) {
  if (workers == nullptr) return bytes;
  const bool chief = is_chief(workers);
  const Tensor size = first_worker_value(*workers, Tensor::scalar(static_cast<std::int64_t>(chief ? bytes.size() : 0),
                                                                  Device::cpu()));
  const auto n = static_cast<std::size_t>(size.item<std::int64_t>());
  // Whole int64 elements hold the bytes: tensors have no byte dtype.
  Tensor words = Tensor::zeros(DType::kInt64, Shape({static_cast<std::int64_t>((n + 7) / 8)}), Device::cpu());
  if (chief && n > 0) std::memcpy(words.raw_data(), bytes.data(), n);
  words = first_worker_value(*workers, words);
  return std::string(static_cast<const char*>(words.raw_data()), n);
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
  absl::Status status;
  if (is_chief(workers)) {
    try {
      part();
    } catch (const Error& e) {
      error = std::current_exception();
      status = e.status();
    } catch (...) {
      error = std::current_exception();
      status = absl::InternalError(describe_exception(error));
    }
  }
  // "<code> <message>": the code as a number, then the chief's message.
  const std::string outcome = chief_bytes(
      workers, absl::StrCat(static_cast<int>(status.code()), " ", status.message()));
  if (error) std::rethrow_exception(error);
  const std::size_t space = outcome.find(' ');
  int code = 0;
  if (space == std::string::npos || !absl::SimpleAtoi(outcome.substr(0, space), &code)) {
    throw InternalError(absl::StrCat("the chief's report of a checkpoint operation does not parse: ", outcome));
  }
  if (code != 0) {
    throw_status(absl::Status(static_cast<absl::StatusCode>(code),
                              absl::StrCat("worker 0, the chief, failed: ", outcome.substr(space + 1))));
  }
}

}  // namespace distribute::detail
