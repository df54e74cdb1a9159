// Copyright horovod_cpp authors. The one clock of the timeline and the transports' phases.
#pragma once

#include <chrono>
#include <cstdint>

namespace hvd {

/// Microseconds on the steady clock (the timeline's time base, shared by every thread).
inline int64_t steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace hvd
