// Copyright horovod_cpp authors. Public API: the exceptions thrown by horovod_cpp.
#pragma once

#include <stdexcept>
#include <string>

namespace hvd {

/// What went wrong, carried by every hvd::Error and reported by Handle::error_code().
enum class ErrorCode : int {
  kOk = 0,
  kNotInitialized = 1,    ///< used before init() or after shutdown().
  kInvalidArgument = 2,   ///< local misuse, detected on this rank before any communication.
  kMismatch = 3,          ///< ranks disagreed on a collective; reported on every rank.
  kShutdown = 4,          ///< the runtime shut down (or stalled and was shut down) first.
  kTimeout = 5,           ///< a wait with a deadline expired; the operation goes on.
  kBackend = 6,           ///< MPI, NCCL or CUDA reported a failure.
  kInternal = 7,          ///< a peer was lost (Gloo controller): shutdown() and init() work again.
};

/// Base of every exception horovod_cpp throws. what() names the tensor, the operation and,
/// for cross-rank failures, the ranks involved.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

/// Thrown when the library is used before init() or after shutdown().
class NotInitializedError : public Error {
 public:
  explicit NotInitializedError(const std::string& w) : Error(ErrorCode::kNotInitialized, w) {}
};

/// Thrown at once, on the calling rank only, for local misuse: a name already pending, an
/// unsupported dtype/op combination, a wrong output size, ...
class InvalidArgumentError : public Error {
 public:
  explicit InvalidArgumentError(const std::string& w) : Error(ErrorCode::kInvalidArgument, w) {}
};

/// A collective that failed on every rank because the ranks disagreed (shape, dtype, op,
/// scale factors, root, collective type). The message names the ranks and what differs.
class MismatchError : public Error {
 public:
  explicit MismatchError(const std::string& w) : Error(ErrorCode::kMismatch, w) {}
};

/// An operation cancelled because the runtime shut down before it could complete (shutdown()
/// on some rank, or the stall timeout HOROVOD_STALL_SHUTDOWN_TIME_SECONDS).
class ShutdownError : public Error {
 public:
  explicit ShutdownError(const std::string& w) : Error(ErrorCode::kShutdown, w) {}
};

/// Handle::wait(timeout) expired. The operation is still pending and may be waited on again.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& w) : Error(ErrorCode::kTimeout, w) {}
};

/// The communication backend (MPI, NCCL, CUDA) failed.
class BackendError : public Error {
 public:
  explicit BackendError(const std::string& w) : Error(ErrorCode::kBackend, w) {}
};

/// A peer rank was lost mid-collective (its process died, its network went away) or did not
/// answer within HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS (Gloo controller). The surviving ranks get
/// it for the work in flight; shutdown() and then init() build a new job from the survivors.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& w) : Error(ErrorCode::kInternal, w) {}
};

/// Throws the hvd::Error subclass for `code` with message `what` (nothing for kOk).
[[noreturn]] void throw_error(ErrorCode code, const std::string& what);

}  // namespace hvd
