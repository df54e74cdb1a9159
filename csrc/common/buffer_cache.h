// Copyright horovod_cpp authors. A bounded cache of large host buffers for result tensors.
//
// allgather, alltoall and reducescatter return a new tensor, and a training step asks for the
// same sizes again and again. glibc serves blocks above its mmap threshold (at most 32 MiB) with
// a fresh mmap each time, so every call faulted in and zeroed every page of its result before
// writing it: on a VM that costs several times the copy itself (64 MiB: ~6x a memcpy). Blocks
// from kMinBytes up are therefore taken from this cache, and a released block returns here
// (its tensor's deleter) instead of going back to the kernel, up to a byte limit
// (HOROVOD_CPP_BUFFER_CACHE_BYTES; oldest blocks are unmapped first). Smaller blocks use new[].
// Fresh blocks from 2 MiB up are aligned to 2 MiB and advised to use transparent huge pages
// (HOROVOD_CPP_HUGE_PAGES): fewer TLB misses for the copies that fill them.
//
// Thread-safe: the deleter of a tensor runs in whichever thread drops the last copy, possibly
// after shutdown; the cache lives until process exit (shared by every deleter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hvd {

/// Allocates `bytes` of uninitialized host memory (at least 1 byte; new[]'s alignment, page
/// aligned from kMinBytes) whose deleter hands large blocks back to the cache. Under
/// AddressSanitizer every block comes from new[] (so that overflows and use after free are
/// still reported).
std::shared_ptr<void> allocate_host_buffer(size_t bytes);

/// Sets the most bytes kept cached (0: cache nothing); trims to it. Default 256 MiB.
void set_host_buffer_cache_limit(int64_t bytes);

/// Whether fresh blocks of 2 MiB and more are aligned to 2 MiB and advised to use transparent
/// huge pages (default on; HOROVOD_CPP_HUGE_PAGES). Blocks already mapped keep their pages.
void set_host_buffer_huge_pages(bool on);

/// Unmaps every cached block (shutdown; the limit stays).
void trim_host_buffer_cache();

/// Blocks and bytes now cached, and hits/misses of allocations from kMinBytes up (tests, logs).
struct HostBufferCacheStats {
  int64_t blocks = 0, bytes = 0, hits = 0, misses = 0;
};
HostBufferCacheStats host_buffer_cache_stats();

}  // namespace hvd
