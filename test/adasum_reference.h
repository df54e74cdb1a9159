// Copyright horovod_cpp authors. The Adasum reference the C++ tests check against
// (test/unit/test_adasum_kernel.cc, test/mpi/test_adasum.cc): plain double arithmetic, the
// tree written as a recursion over halves of the slot range (a different shape of the same
// tree than the kernel's level loop, kernels/host/adasum.h).
#pragma once

#include <cstddef>
#include <vector>

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

/// The tree over slots [lo, lo + n): the first power-of-two block below n combined with the
/// rest, so slot i meets slot i + d at distance d = 1, 2, 4, ... and an unpaired slot joins at
/// a later level.
inline std::vector<double> adasum_tree_ref(const std::vector<std::vector<double>>& s, size_t lo,
                                           size_t n) {
  if (n == 1) return s[lo];
  size_t half = 1;
  while (half * 2 < n) half *= 2;
  return adasum_combine(adasum_tree_ref(s, lo, half), adasum_tree_ref(s, lo + half, n - half));
}

}  // namespace hvdtest
