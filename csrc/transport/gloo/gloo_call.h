// Copyright horovod_cpp authors. The boundary between Gloo's exceptions and our Statuses.
//
// Gloo reports a lost or silent peer by throwing (gloo::IoException for a closed connection
// or a timeout, gloo::EnforceNotMet for a violated invariant); nothing may escape into the
// background thread. Every Gloo call of transport/gloo runs inside gloo_call(), which turns
// whatever it throws into an ErrorCode::kInternal Status (hvd::InternalError for the user)
// that names the group, the call and Gloo's own message (which names the peer's address when
// the failure was on one connection).
#pragma once

#include <exception>
#include <new>
#include <string>

#include "common/status.h"

namespace hvd {

/// Runs `fn`; any exception becomes Status::Internal("<call> over <group> failed: <what>").
template <typename Fn>
Status gloo_call(const std::string& group, const char* call, Fn&& fn) {
  try {
    fn();
    return Status::OK();
  } catch (const std::exception& e) {
    return Status::Internal(std::string(call) + " over " + group + " failed: " + e.what());
  } catch (...) {
    return Status::Internal(std::string(call) + " over " + group + " failed (unknown exception)");
  }
}

}  // namespace hvd
