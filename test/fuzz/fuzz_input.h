// Copyright horovod_cpp authors. Splits one fuzzer input into the pieces a target needs.
//
// The fuzz targets model what arrives from other ranks as several byte strings (one per rank,
// one per cycle). FuzzInput cuts them out of the single buffer libFuzzer mutates: a piece is a
// 16-bit little-endian length followed by that many bytes (fewer when the input ends first),
// so the seed files stay readable by the writer in write_seeds.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace hvd {
namespace fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  bool empty() const { return p_ == end_; }
  /// The next byte, or 0 once the input is used up.
  uint8_t byte() { return p_ == end_ ? 0 : *p_++; }
  /// The next 64-bit word (missing bytes read as 0xff: "no rank objects").
  uint64_t word() {
    uint64_t w = 0;
    for (int i = 0; i < 8; ++i) w |= static_cast<uint64_t>(p_ == end_ ? 0xff : *p_++) << (8 * i);
    return w;
  }
  /// The next length-prefixed piece.
  std::string piece() {
    size_t n = byte();
    n |= static_cast<size_t>(byte()) << 8;
    if (n > static_cast<size_t>(end_ - p_)) n = static_cast<size_t>(end_ - p_);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

/// Appends a piece in the format piece() reads.
inline void append_piece(std::string* out, const std::string& s) {
  out->push_back(static_cast<char>(s.size() & 0xff));
  out->push_back(static_cast<char>((s.size() >> 8) & 0xff));
  out->append(s.size() > 0xffff ? s.substr(0, 0xffff) : s);
}

}  // namespace fuzz
}  // namespace hvd

/// A broken invariant: print it and abort, which libFuzzer (and the replay runner) report as
/// a crash with the input that caused it.
#define HVD_FUZZ_CHECK(cond)                                                          \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
