// Copyright horovod_cpp authors. The host buffer cache behind large result tensors.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "common/buffer_cache.h"
#include "horovod_cpp/tensor.h"

namespace hvd {

#if !defined(__SANITIZE_ADDRESS__)
TEST_CASE("a released large block is reused for the next request of its size", "[buffer_cache]") {
  set_host_buffer_cache_limit(64ll << 20);
  trim_host_buffer_cache();
  const HostBufferCacheStats s0 = host_buffer_cache_stats();
  void* first = nullptr;
  {
    std::shared_ptr<void> a = allocate_host_buffer(3 << 20);
    first = a.get();
    std::memset(a.get(), 7, 3 << 20);  // every byte is usable
  }
  CHECK(host_buffer_cache_stats().blocks == 1);
  {
    // A slightly smaller request takes the same block; a far smaller one does not.
    std::shared_ptr<void> b = allocate_host_buffer((3 << 20) - 4096);
    CHECK(b.get() == first);
    std::shared_ptr<void> c = allocate_host_buffer(1 << 20);
    CHECK(c.get() != first);
  }
  const HostBufferCacheStats s1 = host_buffer_cache_stats();
  CHECK(s1.hits - s0.hits == 1);
  CHECK(s1.misses - s0.misses == 2);
  CHECK(s1.blocks == 2);
  trim_host_buffer_cache();
  CHECK(host_buffer_cache_stats().blocks == 0);
  CHECK(host_buffer_cache_stats().bytes == 0);
}

TEST_CASE("the cache keeps at most its limit, oldest blocks unmapped first", "[buffer_cache]") {
  trim_host_buffer_cache();
  set_host_buffer_cache_limit(5 << 20);
  {
    std::shared_ptr<void> a = allocate_host_buffer(2 << 20);
    std::shared_ptr<void> b = allocate_host_buffer(2 << 20);
    std::shared_ptr<void> c = allocate_host_buffer(2 << 20);
  }
  CHECK(host_buffer_cache_stats().blocks == 2);
  CHECK(host_buffer_cache_stats().bytes == (4 << 20));
  set_host_buffer_cache_limit(0);  // off: nothing is kept
  CHECK(host_buffer_cache_stats().blocks == 0);
  { std::shared_ptr<void> d = allocate_host_buffer(2 << 20); }
  CHECK(host_buffer_cache_stats().blocks == 0);
  set_host_buffer_cache_limit(256ll << 20);
}

// Kilobytes of AnonHugePages in the mapping of /proc/self/smaps that contains `p` (-1: none found).
long huge_kib_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::atol(line.c_str() + 14);
    }
  }
  return -1;
}

TEST_CASE("fresh blocks from 2 MiB start on a huge-page boundary, and the switch turns it off",
          "[buffer_cache]") {
  trim_host_buffer_cache();
  const size_t bytes = (4u << 20) + 12288;  // not a multiple of 2 MiB: the tail stays small pages
  for (bool huge : {true, false}) {
    set_host_buffer_huge_pages(huge);
    for (int i = 0; i < 3; ++i) {  // every fresh block, not just the first
      trim_host_buffer_cache();    // nothing cached: both blocks below are fresh mappings
      std::shared_ptr<void> a = allocate_host_buffer(bytes);
      std::shared_ptr<void> b = allocate_host_buffer(bytes);
      unsigned char* p = static_cast<unsigned char*>(a.get());
      if (huge) {
        CHECK(reinterpret_cast<uintptr_t>(a.get()) % (2u << 20) == 0);
        CHECK(reinterpret_cast<uintptr_t>(b.get()) % (2u << 20) == 0);
      }
      for (size_t k = 0; k < bytes; ++k) p[k] = static_cast<unsigned char>(k * 7 + i);
      bool same = true;
      for (size_t k = 0; k < bytes; ++k)
        same = same && p[k] == static_cast<unsigned char>(k * 7 + i);
      CHECK(same);
      // The kernel may refuse huge pages (its mode "never", fragmentation): report, not fail.
      if (huge && i == 0) WARN("AnonHugePages of a 4 MiB block: " << huge_kib_at(p) << " KiB");
    }
  }
  set_host_buffer_huge_pages(true);
  trim_host_buffer_cache();
}
#endif

TEST_CASE("Tensor::empty of any size gives writable storage of its bytes", "[buffer_cache]") {
  for (int64_t n : {0, 1, 1000, 70000, 1 << 20}) {
    Tensor t = Tensor::empty(DataType::kFloat32, {n});
    REQUIRE(t.nbytes() == n * 4);
    REQUIRE(t.data() != nullptr);
    float* p = t.data_as<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i);
    for (int64_t i = 0; i < n; ++i) REQUIRE(p[i] == static_cast<float>(i));
  }
}

}  // namespace hvd
