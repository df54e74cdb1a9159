// Copyright horovod_cpp authors. Public API: completion handles of asynchronous collectives.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "horovod_cpp/errors.h"
#include "horovod_cpp/tensor.h"

namespace hvd {

namespace detail {
class HandleState;
}

/// The completion of one asynchronous collective (in the spirit of c10d's Work).
///
/// Handles are cheap to copy; copies refer to the same operation. Every method is
/// thread-safe. A default-constructed Handle refers to nothing and throws on use.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::HandleState> state) : state_(std::move(state)) {}

  /// True once the operation has finished, successfully or not. Never blocks.
  bool poll() const;

  /// Blocks until the operation finishes; rethrows its error (an hvd::Error subclass).
  void wait() const;

  /// Blocks until the operation finishes or `timeout` passes. Throws TimeoutError on expiry
  /// (the operation goes on and may be waited on again); rethrows the operation's error.
  void wait(std::chrono::milliseconds timeout) const;

  /// Like wait(timeout) but returns false on expiry instead of throwing.
  bool wait_for(std::chrono::milliseconds timeout) const;
  /// wait(timeout) when `timeout` is positive, otherwise wait() (no deadline): for options
  /// whose timeout 0 means "wait forever".
  void wait_up_to(std::chrono::milliseconds timeout) const;

  /// kOk while pending or after success; the failure's code afterwards.
  ErrorCode error_code() const;
  /// The failure's message ("" while pending or after success).
  std::string error_message() const;

  /// The tensor the library allocated for the result (allgather, alltoall, reducescatter;
  /// the first one of a group). Waits for completion first and rethrows a failure.
  Tensor result() const;
  /// Every result of a grouped allgather or reducescatter, in submission order.
  std::vector<Tensor> results() const;
  /// Alltoall: the number of rows received from each rank. Waits for completion first.
  std::vector<int64_t> received_splits() const;

  /// The name the operation was submitted under.
  const std::string& name() const;

  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::HandleState> state_;
};

}  // namespace hvd
