// Copyright horovod_cpp authors. The Adasum reference the C++ tests check against
// (test/unit/test_adasum_*.cc, test/mpi/test_adasum*.cc): plain double arithmetic, the tree
// written as a recursion over halves of the slot range (a different shape of the same order
// than the kernel's level loop, kernels/host/adasum.h, and the distributed schedule).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "horovod_cpp/types.h"

namespace hvdtest {

/// (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b; a zero vector takes coefficient 1.
inline std::vector<double> adasum_combine(const std::vector<double>& a,
                                          const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double ca = aa > 0 ? 1 - dot / (2 * aa) : 1, cb = bb > 0 ? 1 - dot / (2 * bb) : 1;
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

/// The tree over slots [lo, lo + n) for a power-of-two n: the halves' trees combined, so slot
/// i meets slot i + d at distance d = 1, 2, 4, ...
inline std::vector<double> adasum_pow2_ref(const std::vector<std::vector<double>>& s, size_t lo,
                                           size_t n) {
  if (n == 1) return s[lo];
  return adasum_combine(adasum_pow2_ref(s, lo, n / 2), adasum_pow2_ref(s, lo + n / 2, n / 2));
}

/// Adasum of every slot in the documented order (docs/training.md, "Adasum"): with P the
/// largest power of two <= n, slot P + j first folds into slot j, then the tree over P slots.
inline std::vector<double> adasum_ref(std::vector<std::vector<double>> s) {
  size_t p = 1;
  while (p * 2 <= s.size()) p *= 2;
  for (size_t j = 0; p + j < s.size(); ++j) s[j] = adasum_combine(s[j], s[p + j]);
  return adasum_pow2_ref(s, 0, p);
}

/// How far a result element may be from the double reference `want`: every level rounds to
/// the dtype, so the bound follows its precision (relative to |want|, at least 1).
inline double adasum_tolerance(hvd::DataType d, double want) {
  const double scale = std::max(1.0, std::fabs(want));
  switch (d) {
    case hvd::DataType::kFloat16:
      return 4e-3 * scale;
    case hvd::DataType::kBFloat16:
      return 3e-2 * scale;
    case hvd::DataType::kFloat32:
      return 1e-5 * scale;
    default:
      return 1e-12 * scale;
  }
}

}  // namespace hvdtest
