// Copyright horovod_cpp authors. Private: keeping memory alive while collectives use it.
//
// A collective reads and writes its buffers until its handle completes, and a timed-out wait
// (Handle::wait(timeout)) throws while the operation goes on. So the training code never frees
// a buffer a collective may still touch: buffers are owned by the operation's record and, when
// that record must go away early (a timed-out wait unwinding, a destructor), they are parked
// here with the handles until every handle has finished. Includes public headers only: the
// LibTorch adapter includes it too.
#pragma once

#include <chrono>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "horovod_cpp/handle.h"

namespace hvd {
namespace detail {

/// Keeps `owner` alive until every valid handle of `handles` has finished (successfully or
/// not), then releases it; never blocks. Finished entries are released on later calls; what is
/// still pending at exit stays allocated (reachable, so not reported as a leak), since a
/// collective that never finished may still write into it.
void park(std::vector<Handle> handles, std::shared_ptr<void> owner);

/// park() for an owner held by value (moved into the parking).
template <class T>
void park_owned(std::vector<Handle> handles, T&& owned) {
  park(std::move(handles), std::make_shared<std::decay_t<T>>(std::forward<T>(owned)));
}

/// Number of parked entries whose collectives have not all finished (tests).
size_t parked_pending();

/// Waits for every handle of `handles`, each within `timeout` (zero: no deadline). If a wait
/// throws (a timeout or the operation's error), first parks `owned` (moved) with the handles
/// not finished yet, so the memory they use outlives them, then rethrows.
template <class T>
void wait_all_or_park(const std::vector<Handle>& handles, std::chrono::milliseconds timeout, T& owned) {
  try {
    for (const Handle& h : handles) {
      if (h.valid()) h.wait_up_to(timeout);
    }
  } catch (...) {
    park_owned(handles, std::move(owned));
    throw;
  }
}

}  // namespace detail
}  // namespace hvd
