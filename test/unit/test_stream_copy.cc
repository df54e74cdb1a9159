// Copyright horovod_cpp authors. stream_copy (kernels/host/stream_copy.h): every byte lands,
// whatever the alignment of either end, and nothing around the destination is touched.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/host/stream_copy.h"

using namespace hvd;

namespace {

// A byte that differs by position and pattern: a shifted or missed copy shows.
unsigned char pattern(size_t i, int salt) {
  return static_cast<unsigned char>(i * 131 + salt * 7 + (i >> 8));
}

// Copies `n` bytes from `src_off` into `dst_off` of 64-byte aligned buffers and checks every
// byte of the destination buffer: the copy inside, the guard value outside.
void copy_and_check(size_t n, size_t dst_off, size_t src_off) {
  const size_t room = n + 256;
  std::vector<unsigned char> src_store(room + 64), dst_store(room + 64);
  unsigned char* src =
      src_store.data() + (64 - reinterpret_cast<uintptr_t>(src_store.data()) % 64) % 64;
  unsigned char* dst =
      dst_store.data() + (64 - reinterpret_cast<uintptr_t>(dst_store.data()) % 64) % 64;
  for (size_t i = 0; i < room; ++i) src[i] = pattern(i, 1);
  std::memset(dst, 0xA5, room);
  stream_copy(dst + dst_off, src + src_off, n);
  for (size_t i = 0; i < room; ++i) {
    const bool inside = i >= dst_off && i < dst_off + n;
    const unsigned char want = inside ? pattern(i - dst_off + src_off, 1) : 0xA5;
    if (dst[i] != want) {
      FAIL("n " << n << ", dst offset " << dst_off << ", src offset " << src_off << ": byte " << i
                << " is " << int(dst[i]) << ", expected " << int(want)
                << (inside ? " (copied)" : " (outside the copy)"));
    }
  }
}

}  // namespace

TEST_CASE("stream_copy: every length around the line size, every offset of either end",
          "[stream_copy]") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{63}, size_t{64}, size_t{65},
                   size_t{127}, size_t{128}, size_t{129}, size_t{200}, size_t{4096 + 13}}) {
    for (size_t dst_off = 0; dst_off < 64; ++dst_off) {
      for (size_t src_off : {size_t{0}, size_t{1}, size_t{8}, size_t{33}, size_t{63}}) {
        copy_and_check(n, dst_off, src_off);
      }
    }
  }
}

TEST_CASE("stream_copy: results past the streamed size, off the line at both ends",
          "[stream_copy]") {
  copy_and_check(kStreamCopyMinBytes + 77, 5, 19);
  copy_and_check(kStreamCopyMinBytes, 0, 0);
  copy_and_check(3 * kStreamCopyMinBytes + 1, 63, 1);
}
