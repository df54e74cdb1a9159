// Copyright horovod_cpp authors. Large collectives under mpirun: several rounds of the
// shared-memory segment (reducescatter through shm, 1 MiB chunks by default), odd sizes,
// uneven blocks, prescale and postscale, every reducing dtype, a process set that is a subset,
// and allgather / alltoall results of cached sizes (common/buffer_cache.h) checked on reuse.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {

// Value of element i of rank r's input (small integers: exact in every dtype, sums too).
double value(int r, int64_t i) { return static_cast<double>((i * 7 + r * 3) % 11); }

// Runs one reducescatter of `dim0` x `cols` in `set` (whose members are `ranks`, this rank
// being `me` among them) and counts wrong elements of the result.
int64_t check_reducescatter(const std::string& name, DataType d, ReduceOp op, double pre,
                            double post, int64_t dim0, int64_t cols, hvd::ProcessSet set,
                            const std::vector<int>& ranks, int me) {
  const int n = static_cast<int>(ranks.size());
  const int world_rank = ranks[static_cast<size_t>(me)];
  Buffer in(d, {dim0, cols});
  for (int64_t i = 0; i < in.n(); ++i) in.set(i, value(world_rank, i));
  const Buffer before = in;
  hvd::ReducescatterOptions o;
  o.op = op;
  o.prescale_factor = pre;
  o.postscale_factor = post;
  o.process_set = set;
  hvd::Tensor out = hvd::reducescatter(name, in.view(), o);
  int64_t first = 0;
  for (int r = 0; r < me; ++r) first += dim0 / n + (r < dim0 % n ? 1 : 0);
  const int64_t mine = dim0 / n + (me < dim0 % n ? 1 : 0);
  if (out.shape() != std::vector<int64_t>{mine, cols}) return mine * cols + 1;
  Buffer got(d, out.shape());
  if (!got.bytes.empty()) std::memcpy(got.bytes.data(), out.data(), got.bytes.size());
  const bool fp = hvd::is_floating_point(d);
  int64_t bad = in.bytes != before.bytes ? 1 : 0;  // the input is left alone
  for (int64_t i = 0; i < mine * cols; ++i) {
    const int64_t gi = first * cols + i;
    double sum = 0;
    for (int r : ranks) sum += fp ? value(r, gi) * pre : std::trunc(value(r, gi) * pre);
    double want = sum;
    if (op == ReduceOp::kAverage) {
      want = fp ? sum / n : static_cast<double>(static_cast<int64_t>(sum) / n);
    }
    want = fp ? want * post : (post != 1.0 ? std::trunc(want * post) : want);
    bad += std::fabs(got.get(i) - want) > 1e-2 * std::max(1.0, std::fabs(want));
  }
  return bad;
}

}  // namespace

TEST_CASE("reducescatter: many shm rounds, uneven blocks, scaling, dtypes", "[reducescatter][shm]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  // Blocks of ~300k-600k elements: several rounds of a 1 MiB slot; dim0 % n != 0.
  const int64_t cols = 100003;
  for (int step = 0; step < 2; ++step) {  // the second step reuses cached result blocks
    for (int64_t dim0 : {int64_t(4 * n + 3), int64_t(n - 1 > 0 ? n - 1 : 1)}) {
      for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                         DataType::kInt64, DataType::kFloat16, DataType::kBFloat16}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          const bool fp = hvd::is_floating_point(d);
          const double pre = fp ? 0.5 : 1.0, post = fp ? 4.0 : 1.0;
          const std::string name = "shm.rs." + std::to_string(dim0) + hvd::dtype_name(d) +
                                   hvd::reduce_op_name(op);
          INFO(name);
          CHECK(check_reducescatter(name, d, op, pre, post, dim0, cols, hvd::ProcessSet{0}, all,
                                    me) == 0);
        }
      }
    }
    // Integers with a postscale factor (scaled in double, truncated) and a prescale.
    CHECK(check_reducescatter("shm.rs.int.scaled", DataType::kInt32, ReduceOp::kSum, 3.0, 0.5,
                              2 * n + 1, cols, hvd::ProcessSet{0}, all, me) == 0);
  }
}

TEST_CASE("reducescatter through shm in a process set of some ranks", "[reducescatter][shm]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  std::vector<int> evens;
  for (int r = 0; r < n; r += 2) evens.push_back(r);
  hvd::ProcessSet even = hvd::add_process_set(evens);
  if (me % 2 == 0) {
    for (int k = 0; k < 3; ++k) {
      CHECK(check_reducescatter("shm.rs.set", DataType::kFloat32, ReduceOp::kAverage, 1.0, 1.0,
                                3 * static_cast<int64_t>(evens.size()) + 1, 70001, even, evens,
                                me / 2) == 0);
    }
  }
  // The world set still works beside it.
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  CHECK(check_reducescatter("shm.rs.world", DataType::kFloat64, ReduceOp::kSum, 1.0, 1.0, n + 1,
                            90001, hvd::ProcessSet{0}, all, me) == 0);
  hvd::remove_process_set(even);
}

TEST_CASE("large allgather and alltoall results stay right when their blocks are reused",
          "[allgather][alltoall][shm]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  const int64_t cols = 65537;
  for (int step = 0; step < 4; ++step) {
    // Uneven first dimensions: rank r has r + 2 rows (+ step, so sizes change between steps).
    const int64_t rows = me + 2 + step % 2;
    std::vector<float> in(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows * cols; ++i) in[static_cast<size_t>(i)] = static_cast<float>(value(me, i) + step);
    hvd::Tensor g = hvd::allgather("shm.ag", hvd::TensorView(in.data(), DataType::kFloat32, {rows, cols}));
    int64_t total = 0, bad = 0;
    for (int r = 0; r < n; ++r) total += r + 2 + step % 2;
    REQUIRE(g.shape() == std::vector<int64_t>{total, cols});
    int64_t at = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t rr = (r + 2 + step % 2) * cols;
      for (int64_t i = 0; i < rr; ++i) bad += g.data_as<float>()[at + i] != static_cast<float>(value(r, i) + step);
      at += rr;
    }
    CHECK(bad == 0);
    // Uneven splits: rank me sends (me + dst + step) % 3 + 1 rows to dst.
    auto split = [&](int src, int dst) { return static_cast<int64_t>((src + dst + step) % 3 + 1); };
    std::vector<int64_t> splits(static_cast<size_t>(n));
    int64_t send_rows = 0;
    for (int r = 0; r < n; ++r) send_rows += splits[static_cast<size_t>(r)] = split(me, r);
    std::vector<int32_t> a(static_cast<size_t>(send_rows * cols));
    int64_t row = 0;
    for (int r = 0; r < n; ++r) {
      for (int64_t j = 0; j < split(me, r); ++j, ++row) {
        for (int64_t c = 0; c < cols; ++c) a[static_cast<size_t>(row * cols + c)] = me * 1000000 + r * 10000 + static_cast<int32_t>(j * 100 + c % 97);
      }
    }
    auto res = hvd::alltoall("shm.a2a", hvd::TensorView(a.data(), DataType::kInt32, {send_rows, cols}), splits);
    bad = 0;
    row = 0;
    for (int r = 0; r < n; ++r) {
      CHECK(res.received_splits[static_cast<size_t>(r)] == split(r, me));
      for (int64_t j = 0; j < split(r, me); ++j, ++row) {
        for (int64_t c = 0; c < cols; ++c) {
          bad += res.output.data_as<int32_t>()[row * cols + c] != r * 1000000 + me * 10000 + static_cast<int32_t>(j * 100 + c % 97);
        }
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("broadcast, allgather and alltoall at every size class, uneven blocks",
          "[broadcast][allgather][alltoall][shm]") {
  // From a few bytes to several pieces of the shared segment: across the thresholds between
  // MPI, the two-copy path and the single-copy path (whichever this run's settings choose).
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  auto val = [](int r, int64_t i, int step) {
    return static_cast<int32_t>(r * 1000003 + (i * 7 + step) % 100003);
  };
  int step = 0;
  for (int64_t cols : {int64_t{1}, int64_t{1000}, int64_t{25000}, int64_t{70001}}) {
    ++step;
    const std::string tag = std::to_string(cols);
    // broadcast from every root: 3 rows of `cols`
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> b(static_cast<size_t>(3 * cols));
      for (size_t i = 0; i < b.size(); ++i) b[i] = val(me, static_cast<int64_t>(i), step);
      hvd::broadcast("sz.bcast." + tag + "." + std::to_string(root),
                     hvd::TensorView(b.data(), DataType::kInt32, {3, cols}), root);
      int64_t bad = 0;
      for (size_t i = 0; i < b.size(); ++i) bad += b[i] != val(root, static_cast<int64_t>(i), step);
      CHECK(bad == 0);
    }
    // allgather: rank r has (r + step) % 3 rows (some ranks none)
    auto rows_of = [&](int r) { return static_cast<int64_t>((r + step) % 3); };
    std::vector<int32_t> in(static_cast<size_t>(rows_of(me) * cols));
    for (size_t i = 0; i < in.size(); ++i) in[i] = val(me, static_cast<int64_t>(i), step);
    hvd::Tensor g = hvd::allgather("sz.ag." + tag,
                                   hvd::TensorView(in.data(), DataType::kInt32, {rows_of(me), cols}));
    int64_t total = 0, bad = 0, at = 0;
    for (int r = 0; r < n; ++r) total += rows_of(r);
    REQUIRE(g.shape() == std::vector<int64_t>{total, cols});
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < rows_of(r) * cols; ++i) bad += g.data_as<int32_t>()[at + i] != val(r, i, step);
      at += rows_of(r) * cols;
    }
    CHECK(bad == 0);
    // alltoall: src sends (src + 2 * dst + step) % 4 rows to dst (zero-size blocks included)
    auto split = [&](int src, int dst) { return static_cast<int64_t>((src + 2 * dst + step) % 4); };
    std::vector<int64_t> splits(static_cast<size_t>(n));
    int64_t send_rows = 0;
    for (int r = 0; r < n; ++r) send_rows += splits[static_cast<size_t>(r)] = split(me, r);
    std::vector<int32_t> a(static_cast<size_t>(send_rows * cols));
    int64_t row = 0;
    for (int r = 0; r < n; ++r) {
      for (int64_t j = 0; j < split(me, r) * cols; ++j) a[static_cast<size_t>(row * cols + j)] = val(me, r * 100 + j, step);
      row += split(me, r);
    }
    auto res = hvd::alltoall("sz.a2a." + tag, hvd::TensorView(a.data(), DataType::kInt32, {send_rows, cols}), splits);
    bad = 0;
    at = 0;
    for (int r = 0; r < n; ++r) {
      CHECK(res.received_splits[static_cast<size_t>(r)] == split(r, me));
      for (int64_t j = 0; j < split(r, me) * cols; ++j) bad += res.output.data_as<int32_t>()[at + j] != val(r, me * 100 + j, step);
      at += split(r, me) * cols;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("rounds of changing sizes, one after another, land where every rank reads them",
          "[allreduce][broadcast][allgather][alltoall][reducescatter][shm]") {
  // Rounds of 8 KiB and more move through their slot like a ring, each placed after the last
  // (ShmAllreduce::next_round): the sizes below change from call to call (1-80 K elements per
  // rank), so a rank that placed one round differently from its peers would read stale or
  // foreign bytes from then on.
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  auto val = [](int r, int64_t i, int k) {
    return static_cast<int32_t>((r * 131 + i * 7 + k * 13) % 1009);
  };
  uint32_t lcg = 12345;
  for (int k = 0; k < 60; ++k) {
    lcg = lcg * 1103515245u + 12345u;
    const int64_t count = 1000 + static_cast<int64_t>((lcg >> 8) % 80000);  // per rank
    const std::string tag = "ring." + std::to_string(k);
    INFO(tag << ": " << count << " elements per rank");
    int64_t bad = 0;
    switch (k % 5) {
      case 0: {  // allreduce (sum)
        std::vector<int32_t> b(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) b[static_cast<size_t>(i)] = val(me, i, k);
        hvd::AllreduceOptions o;
        o.op = ReduceOp::kSum;
        hvd::allreduce(tag, hvd::TensorView(b.data(), DataType::kInt32, {count}), o);
        for (int64_t i = 0; i < count; ++i) {
          int64_t want = 0;
          for (int r = 0; r < n; ++r) want += val(r, i, k);
          bad += b[static_cast<size_t>(i)] != want;
        }
        break;
      }
      case 1: {  // broadcast from a root that changes
        const int root = k % n;
        std::vector<int32_t> b(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) b[static_cast<size_t>(i)] = val(me, i, k);
        hvd::broadcast(tag, hvd::TensorView(b.data(), DataType::kInt32, {count}), root);
        for (int64_t i = 0; i < count; ++i) bad += b[static_cast<size_t>(i)] != val(root, i, k);
        break;
      }
      case 2: {  // allgather, rank r contributing count + r * 97 elements
        auto len = [&](int r) { return count + r * 97; };
        std::vector<int32_t> in(static_cast<size_t>(len(me)));
        for (int64_t i = 0; i < len(me); ++i) in[static_cast<size_t>(i)] = val(me, i, k);
        hvd::Tensor g = hvd::allgather(tag, hvd::TensorView(in.data(), DataType::kInt32, {len(me)}));
        int64_t at = 0;
        for (int r = 0; r < n; ++r) {
          for (int64_t i = 0; i < len(r); ++i) bad += g.data_as<int32_t>()[at + i] != val(r, i, k);
          at += len(r);
        }
        CHECK(at == g.numel());
        break;
      }
      case 3: {  // alltoall, count / n elements from every rank to every rank, plus src + dst
        auto split = [&](int src, int dst) { return count / n + src + dst; };
        std::vector<int64_t> splits(static_cast<size_t>(n));
        int64_t total = 0;
        for (int r = 0; r < n; ++r) total += splits[static_cast<size_t>(r)] = split(me, r);
        std::vector<int32_t> a(static_cast<size_t>(total));
        int64_t at = 0;
        for (int r = 0; r < n; ++r) {
          for (int64_t j = 0; j < split(me, r); ++j) a[static_cast<size_t>(at + j)] = val(me, r * 7919 + j, k);
          at += split(me, r);
        }
        auto res = hvd::alltoall(tag, hvd::TensorView(a.data(), DataType::kInt32, {total}), splits);
        at = 0;
        for (int r = 0; r < n; ++r) {
          for (int64_t j = 0; j < split(r, me); ++j) bad += res.output.data_as<int32_t>()[at + j] != val(r, me * 7919 + j, k);
          at += split(r, me);
        }
        CHECK(at == res.output.numel());
        break;
      }
      default: {  // reducescatter (sum) of count * n elements: rank r keeps block r
        const int64_t rows = count / 8 * n;  // 8 columns; rows divide evenly
        std::vector<int32_t> in(static_cast<size_t>(rows * 8));
        for (int64_t i = 0; i < rows * 8; ++i) in[static_cast<size_t>(i)] = val(me, i, k);
        hvd::ReducescatterOptions o;
        o.op = ReduceOp::kSum;
        hvd::Tensor out = hvd::reducescatter(tag, hvd::TensorView(in.data(), DataType::kInt32, {rows, 8}), o);
        const int64_t mine = rows / n * 8, first = me * mine;
        REQUIRE(out.numel() == mine);
        for (int64_t i = 0; i < mine; ++i) {
          int64_t want = 0;
          for (int r = 0; r < n; ++r) want += val(r, first + i, k);
          bad += out.data_as<int32_t>()[i] != want;
        }
      }
    }
    CHECK(bad == 0);
  }
}

namespace {

// Rank r's element i: magnitudes 2^-12 .. 2^11 and both signs, so a float sum depends on the
// order it is taken in.
float spread(int r, int64_t i) {
  const int e = static_cast<int>((i * 5 + r * 3) % 24) - 12;
  const float m = 1.0f + static_cast<float>((i * 13 + r * 7) % 1000) / 1024.0f;
  return ((i + r) % 3 == 0 ? -1.0f : 1.0f) * std::ldexp(m, e);
}

// The rank-order fold ((x0 + x1) + x2) ... of element i, in float.
float fold(int n, int64_t i) {
  float acc = spread(0, i);
  for (int r = 1; r < n; ++r) acc += spread(r, i);
  return acc;
}

// Shared memory (on by default; the suite's variants run on one host) reduces in rank order.
// With HOROVOD_CPP_TEST_RANKS_PER_HOST the world set may span test hosts (transport/hier/: host
// partial sums, then across hosts), which is not the rank-order fold.
bool shm_reduces() {
  const char* v = std::getenv("HOROVOD_CPP_SHM");
  const char* hosts = std::getenv("HOROVOD_CPP_TEST_RANKS_PER_HOST");
  // One host: the shm fold takes every sum in rank order. Across hosts (real ones, or the
  // tests' simulated ones) the hierarchical path sums each host's ranks first.
  return (v == nullptr || std::string(v) != "0") && (hosts == nullptr || std::string(hosts).empty()) &&
         hvd::local_size() == hvd::size();
}

}  // namespace

TEST_CASE("sums are taken in rank order wherever an element lies in a fused batch",
          "[allreduce][reducescatter][shm]") {
  // A run resumed from a checkpoint fuses differently from an uninterrupted one; its results
  // must be bitwise the same (test_torch_semisync.py checks that end to end at np 3).
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  const bool exact = shm_reduces();
  for (int64_t len : {int64_t{5}, int64_t{4099}, int64_t{300007}}) {
    // The same values alone and behind prefixes of several lengths: each element lands in a
    // different rank's share of the batch.
    for (int64_t prefix : {int64_t{0}, int64_t{1}, int64_t{len / 3 + 1}, int64_t{len + 7}}) {
      std::vector<float> pre(static_cast<size_t>(prefix), 1.0f), x(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i) x[static_cast<size_t>(i)] = spread(me, i);
      const std::string tag = std::to_string(len) + "." + std::to_string(prefix);
      hvd::AllreduceOptions o;
      o.op = ReduceOp::kSum;
      if (prefix == 0) {
        hvd::allreduce("order.ar." + tag, hvd::TensorView(x.data(), DataType::kFloat32, {len}), o);
      } else {
        hvd::grouped_allreduce({"order.pre." + tag, "order.ar." + tag},
                               {hvd::TensorView(pre.data(), DataType::kFloat32, {prefix}),
                                hvd::TensorView(x.data(), DataType::kFloat32, {len})},
                               o);
      }
      int64_t bad = 0;
      for (int64_t i = 0; i < len; ++i) {
        const float want = fold(n, i), got = x[static_cast<size_t>(i)];
        bad += exact ? std::memcmp(&want, &got, sizeof want) != 0
                     : std::fabs(got - want) > 1e-3f * std::max(1.0f, std::fabs(want));
      }
      for (float v : pre) bad += v != static_cast<float>(n);
      INFO("allreduce of " << len << " floats behind " << prefix << " (bitwise: " << exact << ")");
      CHECK(bad == 0);
    }
    // Reducescatter: my block of the rank-order fold.
    std::vector<float> all(static_cast<size_t>(len * n));
    for (int64_t i = 0; i < len * n; ++i) all[static_cast<size_t>(i)] = spread(me, i);
    hvd::ReducescatterOptions ro;
    ro.op = ReduceOp::kSum;
    hvd::Tensor out = hvd::reducescatter("order.rs." + std::to_string(len),
                                         hvd::TensorView(all.data(), DataType::kFloat32, {len * n}), ro);
    REQUIRE(out.shape() == std::vector<int64_t>{len});
    int64_t bad = 0;
    for (int64_t i = 0; i < len; ++i) {
      const float want = fold(n, me * len + i), got = out.data_as<float>()[i];
      bad += exact ? std::memcmp(&want, &got, sizeof want) != 0
                   : std::fabs(got - want) > 1e-3f * std::max(1.0f, std::fabs(want));
    }
    INFO("reducescatter of " << len << " floats per rank (bitwise: " << exact << ")");
    CHECK(bad == 0);
  }
}
