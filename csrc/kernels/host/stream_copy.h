// Copyright horovod_cpp authors. A copy whose stores bypass the cache, for results that are
// large and not read again soon.
//
// Why: a collective's result buffer was last written a call or more ago (the caller still holds
// the previous result while the next one is made, so the blocks alternate). Its lines have left
// the cache by then, and an ordinary store first reads each line from memory (read for
// ownership). On the benchmark VM an MPI allgather of 8 MiB into two alternating buffers took
// 1.27-1.33x as long as into one fixed buffer. Non-temporal stores write whole lines without
// reading them. glibc's memcpy switches to them only above 3/4 of the last-level cache it is
// told about, and a VM may report a large one (300 MiB on the benchmark VM): it never does.
#pragma once

#include <cstddef>

namespace hvd {

/// Copies `n` bytes from `src` to `dst` (not overlapping) with non-temporal stores where the
/// CPU has them (x86-64: SSE2), std::memcpy elsewhere and for the unaligned head and tail.
/// The stores are fenced before return: the bytes are visible to other threads and processes
/// as after a memcpy.
void stream_copy(void* dst, const void* src, size_t n);

/// Results of at least this many bytes are written with stream_copy(): smaller ones are likely
/// still in cache and read again soon.
constexpr size_t kStreamCopyMinBytes = 2u << 20;

}  // namespace hvd
