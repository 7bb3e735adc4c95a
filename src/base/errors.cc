// The error taxonomy: statuses to exceptions, and exceptions described in messages.
#include "distribute/errors.h"

#include "base/error_code.h"

namespace distribute {

Error::Error(absl::StatusCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

void throw_status(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument: throw InvalidArgumentError(message);
    case absl::StatusCode::kFailedPrecondition: throw FailedPreconditionError(message);
    case absl::StatusCode::kDeadlineExceeded: throw DeadlineExceededError(message);
    case absl::StatusCode::kAborted: throw AbortedError(message);
    case absl::StatusCode::kUnimplemented: throw UnimplementedError(message);
    case absl::StatusCode::kOutOfRange: throw OutOfRangeError(message);
    case absl::StatusCode::kResourceExhausted: throw ResourceExhaustedError(message);
    case absl::StatusCode::kUnavailable: throw UnavailableError(message);
    case absl::StatusCode::kDataLoss: throw DataLossError(message);
    case absl::StatusCode::kOk: throw InternalError("throw_status called with an OK status");
    default: throw InternalError(message);
  }
}

namespace detail {

std::string describe_exception(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

absl::StatusCode status_code_of(const std::exception_ptr& error, absl::StatusCode otherwise) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.code();
  } catch (...) {
    return otherwise;
  }
}

}  // namespace detail
}  // namespace distribute
