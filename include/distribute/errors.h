// The error taxonomy of distribute. Every public entry point reports failures by throwing a subclass
// of distribute::Error; each carries the absl::StatusCode it stands for, so code that prefers
// statuses can call status(). Internal layers may pass absl::Status upward and turn it into an
// exception at the public boundary with throw_status(). docs/errors.md lists every situation.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"

namespace distribute {

class Error : public std::runtime_error {
 public:
  Error(absl::StatusCode code, const std::string& message);
  absl::StatusCode code() const noexcept { return code_; }
  absl::Status status() const { return absl::Status(code_, what()); }
  // The replica whose step raised this error when Strategy::run rethrows it; -1 when it was not
  // raised by a replica (or by no single one, e.g. a mismatch between replicas).
  int replica_id() const noexcept { return replica_id_; }
  void set_replica_id(int replica_id) noexcept { replica_id_ = replica_id; }

 private:
  absl::StatusCode code_;
  int replica_id_ = -1;
};

#define DISTRIBUTE_DEFINE_ERROR(Name, Code)                                        \
  class Name : public Error {                                                      \
   public:                                                                         \
    explicit Name(const std::string& message) : Error(absl::StatusCode::Code, message) {} \
  }

// Bad values: devices, axes, shapes, dtypes, structures, reduce-op names, batch sizes.
DISTRIBUTE_DEFINE_ERROR(InvalidArgumentError, kInvalidArgument);
// The right call in the wrong context or state (replica vs cross-replica context, mixed scopes).
DISTRIBUTE_DEFINE_ERROR(FailedPreconditionError, kFailedPrecondition);
// A collective wait ran past its timeout.
DISTRIBUTE_DEFINE_ERROR(DeadlineExceededError, kDeadlineExceeded);
// This replica was released from a wait because another replica failed.
DISTRIBUTE_DEFINE_ERROR(AbortedError, kAborted);
// The build or backend does not offer what was asked for.
DISTRIBUTE_DEFINE_ERROR(UnimplementedError, kUnimplemented);
// An index outside a container (a replica id, a shape dimension).
DISTRIBUTE_DEFINE_ERROR(OutOfRangeError, kOutOfRange);
// A device, driver or system call failed.
DISTRIBUTE_DEFINE_ERROR(InternalError, kInternal);
// Device memory ran out (or a logical device's memory_limit was reached).
DISTRIBUTE_DEFINE_ERROR(ResourceExhaustedError, kResourceExhausted);
// A device or its driver is not usable now (no driver, GPU lost, peer unreachable).
DISTRIBUTE_DEFINE_ERROR(UnavailableError, kUnavailable);
// Stored data is unreadable: a truncated or corrupt checkpoint file.
DISTRIBUTE_DEFINE_ERROR(DataLossError, kDataLoss);

#undef DISTRIBUTE_DEFINE_ERROR

// Throws the Error subclass that matches status.code(). status must not be OK.
[[noreturn]] void throw_status(const absl::Status& status);

namespace detail {
// what() of the exception, for messages that report one exception inside another.
std::string describe_exception(const std::exception_ptr& error);
}  // namespace detail

}  // namespace distribute
