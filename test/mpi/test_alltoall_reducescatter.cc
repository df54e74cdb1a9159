// Copyright horovod_cpp authors. Alltoall and reducescatter under mpirun.
#include <cmath>
#include <cstring>

#include "test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {
// Rows rank `src` sends rank `dst` with uneven splits (some zero).
int64_t split_of(int src, int dst) { return (src + 2 * dst) % 3; }
// Value of column c of the j-th row that src sends to dst.
double a2a_value(int src, int dst, int64_t j, int64_t c) { return src * 1000 + dst * 100 + j * 10 + c; }
}  // namespace

TEST_CASE("alltoall: uneven splits incl. zero-size sends, every dtype", "[alltoall]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  for (int step = 0; step < 2; ++step) {  // the second step hits the cache
    for (DataType d : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16, DataType::kUInt8,
                       DataType::kFloat64, DataType::kInt32}) {
      const int64_t cols = 3;
      std::vector<int64_t> splits(static_cast<size_t>(n));
      int64_t rows = 0;
      for (int r = 0; r < n; ++r) rows += splits[static_cast<size_t>(r)] = split_of(me, r);
      Buffer in(d, {rows, cols});
      int64_t row = 0;
      for (int r = 0; r < n; ++r) {
        for (int64_t j = 0; j < split_of(me, r); ++j, ++row) {
          for (int64_t c = 0; c < cols; ++c) in.set(row * cols + c, std::fmod(a2a_value(me, r, j, c), 200));
        }
      }
      auto res = hvd::alltoall(std::string("a2a.") + hvd::dtype_name(d), in.view(), splits);
      int64_t expect_rows = 0;
      for (int r = 0; r < n; ++r) {
        CHECK(res.received_splits[static_cast<size_t>(r)] == split_of(r, me));
        expect_rows += split_of(r, me);
      }
      REQUIRE(res.output.shape() == std::vector<int64_t>{expect_rows, cols});
      Buffer got(d, res.output.shape());
      if (!got.bytes.empty()) std::memcpy(got.bytes.data(), res.output.data(), got.bytes.size());
      int64_t bad = 0;
      row = 0;
      for (int r = 0; r < n; ++r) {
        for (int64_t j = 0; j < split_of(r, me); ++j, ++row) {
          for (int64_t c = 0; c < cols; ++c) {
            bad += got.get(row * cols + c) != std::fmod(a2a_value(r, me, j, c), 200);
          }
        }
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("alltoall: even split by default, and its errors", "[alltoall][errors]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  std::vector<int32_t> v(static_cast<size_t>(2 * n));
  for (int i = 0; i < 2 * n; ++i) v[static_cast<size_t>(i)] = me * 100 + i;
  auto res = hvd::alltoall("a2a.even", hvd::TensorView(v.data(), DataType::kInt32, {2 * n}));
  REQUIRE(res.output.numel() == 2 * n);
  int bad = 0;
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < 2; ++j) bad += res.output.data_as<int32_t>()[2 * r + j] != r * 100 + 2 * me + j;
  }
  CHECK(bad == 0);
  // dim0 not divisible by the number of ranks
  CHECK_THROWS_WITH(hvd::alltoall_async("a2a.odd", hvd::TensorView(v.data(), DataType::kInt32, {2 * n + 1})),
                    Catch::Contains("not divisible"));
  CHECK_THROWS_WITH(hvd::alltoall_async("a2a.len", hvd::TensorView(v.data(), DataType::kInt32, {2 * n}), {1}),
                    Catch::Contains("splits for"));
  std::vector<int64_t> too_many(static_cast<size_t>(n), 3);
  CHECK_THROWS_WITH(hvd::alltoall_async("a2a.sum", hvd::TensorView(v.data(), DataType::kInt32, {2 * n}), too_many),
                    Catch::Contains("past dimension 0"));
  // Mismatched trailing dims across ranks fail everywhere; then the next one works.
  const int64_t cols = me == n - 1 ? 2 : 1;
  try {
    hvd::alltoall("a2a.mismatch", hvd::TensorView(v.data(), DataType::kInt32, {n, cols}));
    FAIL_CHECK("mismatched alltoall succeeded");
  } catch (const hvd::MismatchError& e) {
    CHECK(std::string(e.what()).find("'a2a.mismatch'") != std::string::npos);
    CHECK(std::string(e.what()).find("trailing dims [2]") != std::string::npos);
  }
  auto again = hvd::alltoall("a2a.even", hvd::TensorView(v.data(), DataType::kInt32, {2 * n}));
  CHECK(again.output.numel() == 2 * n);
}

TEST_CASE("reducescatter: sum and average, uneven rows, scaling", "[reducescatter]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  for (int64_t dim0 : {int64_t(2 * n), int64_t(2 * n + 1), int64_t(1)}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kFloat16}) {
        const int64_t cols = 5;
        Buffer in(d, {dim0, cols});
        for (int64_t i = 0; i < in.n(); ++i) in.set(i, static_cast<double>((i % 7) + me));
        hvd::ReducescatterOptions o;
        o.op = op;
        if (hvd::is_floating_point(d)) o.postscale_factor = 2.0;
        const std::string name = "rs." + std::to_string(dim0) + hvd::reduce_op_name(op) + hvd::dtype_name(d);
        hvd::Tensor out = hvd::reducescatter(name, in.view(), o);
        // My rows: the first dim0 % n ranks get one more.
        int64_t first = 0;
        for (int r = 0; r < me; ++r) first += dim0 / n + (r < dim0 % n ? 1 : 0);
        const int64_t mine = dim0 / n + (me < dim0 % n ? 1 : 0);
        REQUIRE(out.shape() == std::vector<int64_t>{mine, cols});
        Buffer got(d, out.shape());
        if (!got.bytes.empty()) std::memcpy(got.bytes.data(), out.data(), got.bytes.size());
        int bad = 0;
        for (int64_t i = 0; i < mine * cols; ++i) {
          const int64_t gi = first * cols + i;
          double sum = 0;
          for (int r = 0; r < n; ++r) sum += static_cast<double>((gi % 7) + r);
          double want = sum;
          if (op == ReduceOp::kAverage) {
            want = hvd::is_floating_point(d) ? sum / n : static_cast<double>(static_cast<int64_t>(sum) / n);
          }
          want *= o.postscale_factor;
          bad += std::fabs(got.get(i) - want) > 1e-2 * std::max(1.0, std::fabs(want));
        }
        CHECK(bad == 0);
      }
    }
  }
  float x = 1;
  CHECK_THROWS_AS(hvd::reducescatter_async("rs.scalar", hvd::TensorView(&x, DataType::kFloat32, {})),
                  hvd::InvalidArgumentError);
  hvd::ReducescatterOptions mx;
  mx.op = ReduceOp::kMax;
  CHECK_THROWS_AS(hvd::reducescatter_async("rs.max", hvd::TensorView(&x, DataType::kFloat32, {1}), mx),
                  hvd::InvalidArgumentError);
}

TEST_CASE("grouped allgather and grouped reducescatter", "[grouped]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  std::vector<float> a(static_cast<size_t>(me + 1), static_cast<float>(me));
  std::vector<float> b(3, static_cast<float>(10 + me));
  hvd::Handle h = hvd::grouped_allgather_async(
      {"ga.a", "ga.b"}, {hvd::TensorView(a.data(), DataType::kFloat32, {me + 1}),
                         hvd::TensorView(b.data(), DataType::kFloat32, {1, 3})});
  wait_ok(h);
  auto results = h.results();
  REQUIRE(results.size() == 2);
  CHECK(results[0].numel() == n * (n + 1) / 2);
  CHECK(results[1].shape() == std::vector<int64_t>{n, 3});
  int bad = 0;
  int64_t k = 0;
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j <= r; ++j) bad += results[0].data_as<float>()[k++] != r;
    for (int c = 0; c < 3; ++c) bad += results[1].data_as<float>()[r * 3 + c] != 10 + r;
  }
  CHECK(bad == 0);

  std::vector<double> x(static_cast<size_t>(2 * n), 1.0 + me), y(static_cast<size_t>(n), 2.0 * me);
  hvd::ReducescatterOptions sum;
  sum.op = ReduceOp::kSum;
  hvd::Handle g = hvd::grouped_reducescatter_async(
      {"grs.x", "grs.y"}, {hvd::TensorView(x.data(), DataType::kFloat64, {2 * n}),
                           hvd::TensorView(y.data(), DataType::kFloat64, {n})}, sum);
  wait_ok(g);
  auto rs = g.results();
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].numel() == 2);
  CHECK(rs[1].numel() == 1);
  CHECK(rs[0].data_as<double>()[1] == n * (n + 1) / 2.0);
  CHECK(rs[1].data_as<double>()[0] == n * (n - 1) * 1.0);
}
