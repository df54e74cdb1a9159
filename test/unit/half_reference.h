// Copyright horovod_cpp authors. Independent float16/bfloat16 references for the tests: values
// decoded with ldexp from the bit fields, rounding by searching the sorted table of all finite
// values (nearest, ties to the even pattern). Slow and obvious on purpose.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace hvd {
namespace testing {

inline double ref_half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  double v;
  if (e == 0x1F) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else {
    v = std::ldexp(1.0 + m / 1024.0, e - 15);
  }
  return s ? -v : v;
}

inline double ref_bf16_value(uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 0xFF, m = b & 0x7F;
  double v;
  if (e == 0xFF) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -133);
  } else {
    v = std::ldexp(1.0 + m / 128.0, e - 127);
  }
  return s ? -v : v;
}

// Rounds `x` to the format whose non-negative finite patterns 0..max_pattern increase with
// their value `value_of`; `inf_pattern` beyond the largest value plus half an ulp.
template <double (*ValueOf)(uint16_t)>
uint16_t ref_round(double x, uint16_t max_pattern, uint16_t inf_pattern, uint16_t nan_pattern) {
  static const std::vector<double> table = [max_pattern] {
    std::vector<double> t;
    for (uint32_t p = 0; p <= max_pattern; ++p) t.push_back(ValueOf(static_cast<uint16_t>(p)));
    return t;
  }();
  if (std::isnan(x)) return nan_pattern;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  const double maxv = table.back();
  const double ulp = maxv - table[table.size() - 2];
  if (a >= maxv + ulp / 2) return static_cast<uint16_t>(sign | inf_pattern);
  auto it = std::upper_bound(table.begin(), table.end(), a);  // first value > a
  const size_t hi = static_cast<size_t>(it - table.begin());
  if (hi == table.size()) return static_cast<uint16_t>(sign | max_pattern);
  const size_t lo = hi - 1;  // table[lo] <= a < table[hi]
  const double dlo = a - table[lo], dhi = table[hi] - a;
  size_t pick;
  if (dlo < dhi) {
    pick = lo;
  } else if (dhi < dlo) {
    pick = hi;
  } else {
    pick = (lo % 2 == 0) ? lo : hi;
  }
  return static_cast<uint16_t>(sign | pick);
}

inline uint16_t ref_float_to_half(double x) {
  return ref_round<ref_half_value>(x, 0x7BFF, 0x7C00, 0x7E00);
}
inline uint16_t ref_float_to_bf16(double x) {
  return ref_round<ref_bf16_value>(x, 0x7F7F, 0x7F80, 0x7FC0);
}

inline bool is_half_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }
inline bool is_bf16_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F); }

}  // namespace testing
}  // namespace hvd
