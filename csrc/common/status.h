// Copyright horovod_cpp authors. Status: the error type used inside the library.
//
// Inside the background thread and across module boundaries functions return a Status; the
// public API turns a failed Status into the matching hvd::Error exception (throw_status).
#pragma once

#include <string>
#include <utility>

#include "horovod_cpp/errors.h"

namespace hvd {

class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status NotInitialized(std::string m) { return {ErrorCode::kNotInitialized, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
  static Status Mismatch(std::string m) { return {ErrorCode::kMismatch, std::move(m)}; }
  static Status Shutdown(std::string m) { return {ErrorCode::kShutdown, std::move(m)}; }
  static Status Backend(std::string m) { return {ErrorCode::kBackend, std::move(m)}; }
  static Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

/// Throws the hvd::Error matching a failed status; does nothing for OK.
inline void throw_if_error(const Status& s) {
  if (!s.ok()) throw_error(s.code(), s.message());
}

}  // namespace hvd

/// Returns the status of `expr` from the enclosing function when it failed.
#define HVD_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::hvd::Status _hvd_st = (expr);        \
    if (!_hvd_st.ok()) return _hvd_st;     \
  } while (0)
