// Copyright horovod_cpp authors. The vector-halving distance-doubling schedule
// (transport/cpu/adasum_vhdd.h) over in-process data planes at 1 to 9 ranks (counts mpirun's
// suites do not reach): every element of every rank's result against the double reference of
// the documented order (../adasum_reference.h), bit-identical results on every rank, buffers
// shorter than the rank count (empty pieces), fused segments cut by the pieces, a zero vector.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../adasum_reference.h"
#include "common/half.h"
#include "in_process_data_plane.h"
#include "transport/cpu/adasum_vhdd.h"

using namespace hvd;
using hvd::testing::InProcessDataPlane;
using hvd::testing::InProcessHub;
using hvdtest::adasum_ref;

namespace {

// Rank r's element i: deterministic, different per rank; rank `zero_rank` holds zeros.
double input(int r, int64_t i, int zero_rank) {
  if (r == zero_rank) return 0.0;
  return std::sin(1.3 * r + 0.41 * static_cast<double>(i) + 0.2) + 0.1 * r;
}

// One element of a buffer of `dtype` as double, and back (half types by their bits).
double get(const std::vector<unsigned char>& b, DataType d, int64_t i) {
  switch (d) {
    case DataType::kFloat32:
      return reinterpret_cast<const float*>(b.data())[i];
    case DataType::kFloat16:
      return fp16_to_float(reinterpret_cast<const uint16_t*>(b.data())[i]);
    default:
      return reinterpret_cast<const double*>(b.data())[i];
  }
}
void put(std::vector<unsigned char>& b, DataType d, int64_t i, double v) {
  switch (d) {
    case DataType::kFloat32:
      reinterpret_cast<float*>(b.data())[i] = static_cast<float>(v);
      break;
    case DataType::kFloat16:
      reinterpret_cast<uint16_t*>(b.data())[i] = float_to_fp16(static_cast<float>(v));
      break;
    default:
      reinterpret_cast<double*>(b.data())[i] = v;
      break;
  }
}

// Runs the schedule on `n` threads over segments of the given lengths and checks the result.
void check(int n, DataType dtype, const std::vector<int64_t>& lengths, int zero_rank) {
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  std::vector<AdasumSegment> segs;
  int64_t count = 0;
  for (int64_t len : lengths) {
    segs.push_back({count * es, len});
    count += len;
  }
  // Every rank's buffer as the dtype holds it.
  std::vector<std::vector<unsigned char>> bufs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    bufs[static_cast<size_t>(r)].resize(static_cast<size_t>(count * es));
    for (int64_t i = 0; i < count; ++i)
      put(bufs[static_cast<size_t>(r)], dtype, i, input(r, i, zero_rank));
  }
  // The reference, per segment, from the rounded inputs.
  std::vector<double> want(static_cast<size_t>(count));
  for (const AdasumSegment& s : segs) {
    std::vector<std::vector<double>> slots(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < s.count; ++i) {
        slots[static_cast<size_t>(r)].push_back(
            get(bufs[static_cast<size_t>(r)], dtype, s.offset / es + i));
      }
    }
    const std::vector<double> w = adasum_ref(slots);
    for (int64_t i = 0; i < s.count; ++i)
      want[static_cast<size_t>(s.offset / es + i)] = w[static_cast<size_t>(i)];
  }
  InProcessHub hub(n);
  std::vector<Status> st(static_cast<size_t>(n));
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r) {
    th.emplace_back([&, r] {
      InProcessDataPlane plane(&hub, r);
      AdasumVhdd vhdd;
      st[static_cast<size_t>(r)] =
          vhdd.run(plane, r, n, bufs[static_cast<size_t>(r)].data(), count, dtype, segs);
    });
  }
  for (auto& t : th) t.join();
  INFO(n << " ranks, " << dtype_name(dtype) << ", " << lengths.size() << " segments, " << count
         << " elements, zero vector on rank " << zero_rank);
  for (int r = 0; r < n; ++r) REQUIRE(st[static_cast<size_t>(r)].ok());
  int bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double w = want[static_cast<size_t>(i)], g = get(bufs[0], dtype, i);
    if (std::fabs(g - w) > hvdtest::adasum_tolerance(dtype, w) && bad++ < 3) {
      FAIL_CHECK("element " << i << ": got " << g << ", expected " << w);
    }
  }
  CHECK(bad == 0);
  for (int r = 1; r < n; ++r) {
    INFO("rank " << r);
    CHECK(std::memcmp(bufs[0].data(), bufs[static_cast<size_t>(r)].data(), bufs[0].size()) == 0);
  }
}

}  // namespace

TEST_CASE("adasum vhdd at 1 to 9 ranks matches the reference on every rank", "[adasum]") {
  for (int n = 1; n <= 9; ++n) {
    for (DataType d : {DataType::kFloat64, DataType::kFloat32, DataType::kFloat16}) {
      check(n, d, {1000}, -1);
      check(n, d, {1}, -1);  // every piece but one empty
      check(n, d, {3}, -1);
      check(n, d, {std::max<int64_t>(n - 1, 1)}, -1);  // n - 1: one piece empty at P = n
    }
  }
}

TEST_CASE("adasum vhdd of fused segments cut by the pieces, and a zero vector", "[adasum]") {
  for (int n = 2; n <= 9; ++n) {
    check(n, DataType::kFloat64, {5, 1, 17, 0, 3, 64, 2}, -1);
    check(n, DataType::kFloat32, {1, 1, 1}, -1);
    check(n, DataType::kFloat32, {7, 130, 9}, n - 1);  // one rank contributes zeros
    check(n, DataType::kFloat64, {7, 130, 9}, 0);
  }
}

TEST_CASE("adasum pieces split the buffer into consecutive halves", "[adasum]") {
  // After L levels, the 2^L pieces tile [0, count) without overlap.
  for (int64_t count : {0, 1, 5, 64, 1001}) {
    for (int levels = 0; levels <= 3; ++levels) {
      std::vector<int> covered(static_cast<size_t>(count), 0);
      for (int r = 0; r < (1 << levels); ++r) {
        const auto p = adasum_piece(r, levels, count);
        CHECK(p.first <= p.second);
        CHECK(p.second - p.first <= count / (1 << levels) + 1);
        for (int64_t i = p.first; i < p.second; ++i) ++covered[static_cast<size_t>(i)];
      }
      for (int c : covered) CHECK(c == 1);
    }
  }
}
