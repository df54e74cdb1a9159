// Copyright horovod_cpp authors.
#include "common/buffer_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <new>

namespace hvd {
namespace {

// Below this, new[] is as fast (glibc reuses heap memory for it).
constexpr size_t kMinBytes = 256 * 1024;
// Fresh blocks from this size up are aligned to it and advised to use transparent huge pages.
constexpr size_t kHugeBytes = 2 * 1024 * 1024;
// A cached block serves a request of at least 3/4 of its size (bounded waste).
constexpr size_t kSlackDivisor = 4;
constexpr size_t kMaxBlocks = 64;

size_t page_round(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

class Cache {
 public:
  struct Block {
    void* data;
    size_t bytes;  // mapped length (a multiple of the page size)
  };

  // A cached block of at least `bytes` and not much more, or a fresh mapping.
  Block take(size_t bytes) {
    const size_t want = page_round(bytes);
    {
      std::lock_guard<std::mutex> lk(mu_);
      size_t best = free_.size();
      for (size_t i = 0; i < free_.size(); ++i) {
        const size_t have = free_[i].bytes;
        if (have >= want && have - want <= have / kSlackDivisor &&
            (best == free_.size() || have < free_[best].bytes)) {
          best = i;
        }
      }
      if (best != free_.size()) {
        Block b = free_[best];
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
        cached_ -= b.bytes;
        ++hits_;
        return b;
      }
      ++misses_;
    }
    return {map_fresh(want), want};
  }

  // A fresh private mapping of `bytes` (page-rounded). From kHugeBytes up it starts on a
  // huge-page boundary and asks for transparent huge pages (MADV_HUGEPAGE; the kernel's
  // default "madvise" mode grants them only where asked): a 4 MiB result then costs the
  // copies writing it two TLB entries instead of 1,024. Where the kernel refuses, it simply
  // keeps small pages.
  void* map_fresh(size_t bytes) {
    if (!huge_.load(std::memory_order_relaxed) || bytes < kHugeBytes) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      return p;
    }
    // Over-map by one huge page less a page, then give back the unaligned head and the tail.
    const size_t extra = kHugeBytes - page_round(1);
    void* raw =
        mmap(nullptr, bytes + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + kHugeBytes - 1) / kHugeBytes * kHugeBytes;
    const size_t head = aligned - start;
    if (head > 0) munmap(raw, head);
    if (extra - head > 0) munmap(reinterpret_cast<void*>(aligned + bytes), extra - head);
    void* p = reinterpret_cast<void*>(aligned);
    madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure leaves small pages
    return p;
  }

  void set_huge(bool on) { huge_.store(on, std::memory_order_relaxed); }

  // Keeps `b` for reuse unless that would exceed the limit (the oldest go first).
  void give(Block b) {
    std::deque<Block> drop;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (b.bytes > limit_) {
        drop.push_back(b);
      } else {
        free_.push_back(b);
        cached_ += b.bytes;
        while (cached_ > limit_ || free_.size() > kMaxBlocks) evict_oldest(&drop);
      }
    }
    for (const Block& d : drop) munmap(d.data, d.bytes);  // outside the lock
  }

  void set_limit(int64_t bytes) {
    std::deque<Block> drop;
    {
      std::lock_guard<std::mutex> lk(mu_);
      limit_ = bytes > 0 ? static_cast<size_t>(bytes) : 0;
      while (cached_ > limit_) evict_oldest(&drop);
    }
    for (const Block& d : drop) munmap(d.data, d.bytes);
  }

  void trim() {
    std::deque<Block> drop;
    {
      std::lock_guard<std::mutex> lk(mu_);
      while (!free_.empty()) evict_oldest(&drop);
    }
    for (const Block& d : drop) munmap(d.data, d.bytes);
  }

  HostBufferCacheStats stats() {
    std::lock_guard<std::mutex> lk(mu_);
    HostBufferCacheStats s;
    s.blocks = static_cast<int64_t>(free_.size());
    s.bytes = static_cast<int64_t>(cached_);
    s.hits = hits_;
    s.misses = misses_;
    return s;
  }

 private:
  void evict_oldest(std::deque<Block>* drop) {
    drop->push_back(free_.front());
    cached_ -= free_.front().bytes;
    free_.pop_front();
  }

  std::mutex mu_;
  std::deque<Block> free_;  // oldest first; guarded by mu_
  size_t cached_ = 0;       // bytes in free_
  size_t limit_ = 256ull * 1024 * 1024;
  std::atomic<bool> huge_{true};  // huge pages for fresh blocks from kHugeBytes
  int64_t hits_ = 0, misses_ = 0;
};

// Never destroyed: deleters may run during static destruction.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

std::shared_ptr<void> allocate_host_buffer(size_t bytes) {
  if (bytes < kMinBytes || kSanitized) {
    return std::shared_ptr<void>(new unsigned char[bytes > 0 ? bytes : 1],
                                 [](void* p) { delete[] static_cast<unsigned char*>(p); });
  }
  const Cache::Block b = cache().take(bytes);
  return std::shared_ptr<void>(b.data, [b](void*) { cache().give(b); });
}

void set_host_buffer_cache_limit(int64_t bytes) { cache().set_limit(bytes); }

void set_host_buffer_huge_pages(bool on) {
  cache().set_huge(on);
}

void trim_host_buffer_cache() { cache().trim(); }

HostBufferCacheStats host_buffer_cache_stats() { return cache().stats(); }

}  // namespace hvd
