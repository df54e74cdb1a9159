// Copyright horovod_cpp authors. The Adasum kernel (kernels/host/adasum.h) in one process: the
// pair rule on vectors whose result is known in closed form, and the tree at every slot count
// from 1 to 9 (rank counts the mpirun suites do not reach) against ../adasum_reference.h.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../adasum_reference.h"
#include "common/half.h"
#include "kernels/host/adasum.h"

using namespace hvd;

using hvdtest::adasum_ref;

TEST_CASE("adasum of two vectors: orthogonal sum, parallel average, zero passes", "[adasum]") {
  std::vector<double> a = {3, 0, 0}, b = {0, -2, 0};
  adasum_pair(a.data(), b.data(), 3, DataType::kFloat64);
  CHECK(a == std::vector<double>{3, -2, 0});
  std::vector<float> p = {1, 2, 3}, q = {2, 4, 6};  // q = 2p: (1 - 1) p + (1 - 1/4) q = 0.75 q
  adasum_pair(p.data(), q.data(), 3, DataType::kFloat32);
  CHECK(p[0] == Approx(1.5f));
  CHECK(p[1] == Approx(3.0f));
  CHECK(p[2] == Approx(4.5f));
  std::vector<double> z = {0, 0}, c = {5, -1};
  adasum_pair(z.data(), c.data(), 2, DataType::kFloat64);
  CHECK(z == c);
  std::vector<uint16_t> h = {float_to_fp16(1.0f), float_to_fp16(0.0f)};
  std::vector<uint16_t> k = {float_to_fp16(1.0f), float_to_fp16(0.0f)};
  adasum_pair(h.data(), k.data(), 2, DataType::kFloat16);  // equal vectors: the vector
  CHECK(fp16_to_float(h[0]) == 1.0f);
  CHECK(fp16_to_float(h[1]) == 0.0f);
}

TEST_CASE("adasum tree at 1 to 9 slots, two segments, matches the reference", "[adasum]") {
  const int64_t n0 = 11, n1 = 5, gap = 3;  // segment 1 starts after a gap of padding
  const int64_t slot = n0 + gap + n1;
  for (int ranks = 1; ranks <= 9; ++ranks) {
    std::vector<double> slots(static_cast<size_t>(ranks * slot));
    std::vector<std::vector<double>> seg0(static_cast<size_t>(ranks)), seg1(seg0.size());
    for (int r = 0; r < ranks; ++r) {
      for (int64_t i = 0; i < slot; ++i) {
        const double v = std::sin(1.7 * r + 0.37 * static_cast<double>(i) + 0.1) + 0.2 * r;
        slots[static_cast<size_t>(r * slot + i)] = v;
        if (i < n0) seg0[static_cast<size_t>(r)].push_back(v);
        if (i >= n0 + gap) seg1[static_cast<size_t>(r)].push_back(v);
      }
    }
    const AdasumSegment segs[2] = {{0, n0}, {(n0 + gap) * 8, n1}};
    adasum_tree(slots.data(), ranks, slot * 8, segs, 2, DataType::kFloat64);
    const std::vector<double> w0 = adasum_ref(seg0), w1 = adasum_ref(seg1);
    INFO(ranks << " slots");
    for (int64_t i = 0; i < n0; ++i)
      CHECK(slots[static_cast<size_t>(i)] == Approx(w0[static_cast<size_t>(i)]).epsilon(1e-12));
    for (int64_t i = 0; i < n1; ++i) {
      CHECK(slots[static_cast<size_t>(n0 + gap + i)] ==
            Approx(w1[static_cast<size_t>(i)]).epsilon(1e-12));
    }
  }
}
