// Copyright horovod_cpp authors. The measured choice between the shared-memory segments and
// MPI for large allgathers and alltoalls (transport/shm/gather_paths.h, kAllgatherPlane and
// kAlltoallPlane), run as test_shm_reduce_paths.cc's cases are: each way forced, then random
// votes. These collectives only move bytes, so every byte of every result is compared with
// what its source rank put there, in several dtypes, with uneven blocks (some empty).
#include <algorithm>
#include <string>
#include <vector>

#include "test_util.h"

using hvd::DataType;
using namespace hvdtest;

namespace {

// Longest block (bytes, about) of each call: below the smallest band (4 KiB in the tests'
// settings) at two ranks, then every band.
const int64_t kLongest[] = {1200, 5000, 20000, 80000};
const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                            DataType::kUInt8, DataType::kInt64};

// Byte `i` of the block rank `src` sends rank `dst` (allgather: dst -1) in call `call`: a byte
// from another place, rank or call differs (but for the odd collision).
unsigned char pattern(int src, int dst, int64_t i, int call) {
  const uint64_t h = (static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull) ^
                     (static_cast<uint64_t>(src * 131 + (dst + 1) * 7) << 40) ^
                     (static_cast<uint64_t>(call) << 24);
  return static_cast<unsigned char>((h >> 32) ^ (h >> 56) ^ static_cast<uint64_t>(i));
}

// Compares `got` with the expected bytes `want` of one call; names the first differences.
int64_t count_bad(const std::string& name, const unsigned char* got,
                  const std::vector<unsigned char>& want) {
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && bad++ < 3) {
      FAIL_CHECK(name << " byte " << i << ": got " << int{got[i]} << ", expected " << int{want[i]});
    }
  }
  return bad;
}

// Calls fn(dtype, longest block, call number) for every dtype x size, `repeats` times.
template <typename Fn>
void each_call(int repeats, Fn&& fn) {
  int call = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    for (DataType d : kDtypes) {
      for (int64_t longest : kLongest) fn(d, longest, ++call);
    }
  }
}

// Rows of rank r's allgather input: uneven, and rank 1 has none in odd calls.
int64_t gather_rows(int r, int call) {
  return r == 1 && call % 2 ? 0 : 2 + 3 * r;
}

// Allgathers of every dtype x size, `repeats` times; every byte of every result checked.
void allgather_round(const std::string& tag, int repeats) {
  const int n = hvd::size(), me = hvd::rank();
  each_call(repeats, [&](DataType d, int64_t longest, int call) {
    const int64_t es = static_cast<int64_t>(hvd::dtype_size(d));
    const int64_t most = 2 + 3 * (n - 1);  // the most rows of any rank
    const int64_t cols = std::max<int64_t>(1, longest / (most * es));
    const int64_t row_bytes = cols * es;
    const std::string name = tag + "." + hvd::dtype_name(d) + "." + std::to_string(longest);
    Buffer in(d, {gather_rows(me, call), cols});
    for (size_t i = 0; i < in.bytes.size(); ++i) {
      in.bytes[i] = pattern(me, -1, static_cast<int64_t>(i), call);
    }
    std::vector<unsigned char> want;
    int64_t rows = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t b = gather_rows(r, call) * row_bytes;
      for (int64_t i = 0; i < b; ++i) want.push_back(pattern(r, -1, i, call));
      rows += gather_rows(r, call);
    }
    hvd::Tensor out = hvd::allgather(name, in.view());
    REQUIRE(out.shape() == hvd::Shape{rows, cols});
    REQUIRE(out.dtype() == d);
    CHECK(count_bad(name, static_cast<const unsigned char*>(out.data()), want) == 0);
  });
}

// Rows rank `src` sends rank `dst`: uneven, some zero, the longest 2 * scale + 1.
int64_t a2a_rows(int src, int dst, int64_t scale) {
  return ((src + 2 * dst) % 3) * scale + (src == dst ? 1 : 0);
}

// Alltoalls of every dtype x size with uneven splits, `repeats` times; every byte of every
// result and every received split checked.
void alltoall_round(const std::string& tag, int repeats) {
  const int n = hvd::size(), me = hvd::rank();
  each_call(repeats, [&](DataType d, int64_t longest, int call) {
    const int64_t es = static_cast<int64_t>(hvd::dtype_size(d));
    const int64_t cols = 5;
    const int64_t scale = std::max<int64_t>(1, longest / (2 * cols * es));
    const int64_t row_bytes = cols * es;
    const std::string name = tag + "." + hvd::dtype_name(d) + "." + std::to_string(longest);
    std::vector<int64_t> splits;
    int64_t rows = 0;
    for (int r = 0; r < n; ++r) {
      splits.push_back(a2a_rows(me, r, scale));
      rows += splits.back();
    }
    Buffer in(d, {rows, cols});
    size_t at = 0;
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < a2a_rows(me, r, scale) * row_bytes; ++i) {
        in.bytes[at++] = pattern(me, r, i, call);
      }
    }
    std::vector<unsigned char> want;
    int64_t expect_rows = 0;
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < a2a_rows(r, me, scale) * row_bytes; ++i) {
        want.push_back(pattern(r, me, i, call));
      }
      expect_rows += a2a_rows(r, me, scale);
    }
    auto res = hvd::alltoall(name, in.view(), splits);
    REQUIRE(res.output.shape() == hvd::Shape{expect_rows, cols});
    REQUIRE(res.received_splits.size() == static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      CHECK(res.received_splits[static_cast<size_t>(r)] == a2a_rows(r, me, scale));
    }
    CHECK(count_bad(name, static_cast<const unsigned char*>(res.output.data()), want) == 0);
  });
}

}  // namespace

TEST_CASE("shm paths: large allgathers, uneven first dimensions, every byte, by every way",
          "[shm_paths]") {
  Session s;
  allgather_round("paths.ag", 5);  // several calls of each class: explored and agreed ways
}

TEST_CASE("shm paths: large alltoalls, uneven splits, every byte, by every way", "[shm_paths]") {
  Session s;
  alltoall_round("paths.a2a", 5);
}
