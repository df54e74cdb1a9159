// Copyright horovod_cpp authors. Allgather, broadcast and barrier under mpirun.
#include <cmath>
#include <cstring>
#include <memory>

#include "test_util.h"

using hvd::DataType;
using namespace hvdtest;

namespace {
double gather_value(int r, int64_t row, int64_t col, DataType d) {
  if (d == DataType::kBool) return (r + row + col) % 2;
  return static_cast<double>((r * 11 + row * 3 + col) % 50);
}
}  // namespace

TEST_CASE("allgather: first dimension differs across ranks, every dtype", "[allgather]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  // Rank r has r+1 rows, except rank 1 which has none.
  auto rows_of = [](int r) -> int64_t { return r == 1 ? 0 : r + 1; };
  for (int step = 0; step < 2; ++step) {
    for (DataType d : all_dtypes()) {
      for (const std::vector<int64_t>& tail : {std::vector<int64_t>{}, {3}, {2, 2}}) {
        std::vector<int64_t> shape = {rows_of(me)};
        shape.insert(shape.end(), tail.begin(), tail.end());
        Buffer b(d, shape);
        const int64_t cols = hvd::num_elements(tail);
        for (int64_t i = 0; i < b.n(); ++i) b.set(i, gather_value(me, i / cols, i % cols, d));
        const std::string name = std::string("gather.") + hvd::dtype_name(d) + hvd::shape_str(tail);
        hvd::Tensor out = hvd::allgather(name, b.view());
        int64_t total = 0;
        for (int r = 0; r < n; ++r) total += rows_of(r);
        REQUIRE(out.shape().size() == shape.size());
        CHECK(out.shape()[0] == total);
        CHECK(out.dtype() == d);
        Buffer got(d, out.shape());
        if (!got.bytes.empty()) std::memcpy(got.bytes.data(), out.data(), got.bytes.size());
        int64_t row = 0, bad = 0;
        for (int r = 0; r < n; ++r) {
          for (int64_t j = 0; j < rows_of(r); ++j, ++row) {
            for (int64_t c = 0; c < cols; ++c) {
              bad += got.get(row * cols + c) != gather_value(r, j, c, d);
            }
          }
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("broadcast: from every root, every dtype", "[broadcast]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  for (int root = 0; root < n; ++root) {
    for (DataType d : all_dtypes()) {
      Buffer b(d, {4, 6});
      for (int64_t i = 0; i < b.n(); ++i) b.set(i, d == DataType::kBool ? (i + me) % 2 : i + 7 * me);
      hvd::broadcast(std::string("bcast.") + hvd::dtype_name(d) + ".root" + std::to_string(root),
                     b.view(), root);
      int bad = 0;
      for (int64_t i = 0; i < b.n(); ++i) {
        const double want = d == DataType::kBool ? (i + root) % 2 : i + 7 * root;
        bad += b.get(i) != want;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("barrier: completes on every rank, repeatedly", "[barrier]") {
  Session s;
  for (int k = 0; k < 5; ++k) CHECK_NOTHROW(hvd::barrier());
}

TEST_CASE("mixed collectives in flight together", "[mixed]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  std::vector<float> a(100, static_cast<float>(me)), b(50, static_cast<float>(me * 2));
  std::vector<int32_t> c(7, me == 0 ? 42 : -1);
  std::vector<int64_t> g(static_cast<size_t>(me + 1), me);
  hvd::AllreduceOptions sum;
  sum.op = hvd::ReduceOp::kSum;
  auto h1 = hvd::allreduce_async("mixed.a", hvd::TensorView(a.data(), DataType::kFloat32, {100}), sum);
  auto h2 = hvd::broadcast_async("mixed.c", hvd::TensorView(c.data(), DataType::kInt32, {7}), 0);
  auto h3 = hvd::allgather_async("mixed.g", hvd::TensorView(g.data(), DataType::kInt64, {me + 1}));
  auto h4 = hvd::allreduce_async("mixed.b", hvd::TensorView(b.data(), DataType::kFloat32, {50}), sum);
  for (auto* h : {&h1, &h2, &h3, &h4}) wait_ok(*h);
  CHECK(a[99] == n * (n - 1) / 2.0f);
  CHECK(b[0] == n * (n - 1) * 1.0f);
  CHECK(c[6] == 42);
  hvd::Tensor gathered = h3.result();
  CHECK(gathered.shape()[0] == n * (n + 1) / 2);
  int64_t idx = 0, bad = 0;
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j <= r; ++j) bad += gathered.data_as<int64_t>()[idx++] != r;
  }
  CHECK(bad == 0);
}

TEST_CASE("unnamed calls: numbered per op; a call rejected on one rank fails everywhere, in step",
          "[naming]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  float f[4] = {1, 1, 1, 1};
  // Every rank makes the call; rank 0 alone rejects it (root out of range). It is still
  // numbered and sent, marked failed: the others fail too, naming rank 0, and the numbering
  // stays the same on every rank.
  if (me == 0) {
    CHECK_THROWS_AS(hvd::broadcast_async("", hvd::TensorView(f, DataType::kFloat32, {4}), n),
                    hvd::InvalidArgumentError);
  } else {
    try {
      hvd::broadcast_async("", hvd::TensorView(f, DataType::kFloat32, {4}), 0).wait();
      FAIL_CHECK("the broadcast rejected on rank 0 succeeded");
    } catch (const hvd::MismatchError& e) {
      CHECK_THAT(e.what(), Catch::Contains("broadcast.noname.0"));
      CHECK_THAT(e.what(), Catch::Contains("rank 0: "));
    }
  }
  for (int k = 0; k < 3; ++k) {
    float x = 1.0f;
    hvd::AllreduceOptions sum;
    sum.op = hvd::ReduceOp::kSum;
    hvd::Handle h = hvd::allreduce_async("", hvd::TensorView(&x, DataType::kFloat32, {1}), sum);
    CHECK(h.name() == "allreduce.noname." + std::to_string(k));
    wait_ok(h);
    CHECK(x == static_cast<float>(n));
    hvd::broadcast("", hvd::TensorView(f, DataType::kFloat32, {4}), 0);
  }
  // Two unnamed groups in flight at once stay distinct.
  float a = 1, b = 2, c = 3, d = 4;
  hvd::AllreduceOptions sum;
  sum.op = hvd::ReduceOp::kSum;
  hvd::Handle g1 = hvd::grouped_allreduce_async({"", ""}, {hvd::TensorView(&a, DataType::kFloat32, {1}),
                                                          hvd::TensorView(&b, DataType::kFloat32, {1})}, sum);
  hvd::Handle g2 = hvd::grouped_allreduce_async({"", ""}, {hvd::TensorView(&c, DataType::kFloat32, {1}),
                                                          hvd::TensorView(&d, DataType::kFloat32, {1})}, sum);
  wait_ok(g1);
  wait_ok(g2);
  CHECK(a == 1.0f * n);
  CHECK(b == 2.0f * n);
  CHECK(c == 3.0f * n);
  CHECK(d == 4.0f * n);
}
