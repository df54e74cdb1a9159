// Copyright horovod_cpp authors. The real shared-memory ("shm") and hierarchical ("hier")
// transports in the in-process thread world: N ranks are N threads, each a whole process set
// (background loop, negotiation, fusion, executor) whose transports were set up through an
// in-process Bootstrap, as the library sets them up through MPI. Fake hosts
// (Config::test_ranks_per_host) give hier its hosts: 4 ranks as 2 hosts x 2, blockwise or
// round robin. Every element of every result is checked against what each rank computes.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "transport/hier/hier_transport.h"
#include "transport/shm/shm_transport.h"
#include "core/handle_state.h"
#include "in_process_data_plane.h"
#include "loop_support.h"

using namespace hvd;
using namespace hvd::testing;

namespace {

// How the ranks are laid out, and which transport must serve them.
struct World {
  int ranks;
  int per_host;      // Config::test_ranks_per_host (0: one real host)
  bool round_robin;  // Config::test_hosts_round_robin
  const char* transports;  // the registry's order, as TransportRegistry::describe() says
};

std::string describe(const World& w) {
  return std::to_string(w.ranks) + " ranks" +
         (w.per_host ? ", " + std::to_string(w.per_host) + " per host" +
                           (w.round_robin ? " (round robin)" : "")
                     : std::string());
}

Config config_for(const World& w) {
  Config c;
  c.cycle_time_ms = 0.5;
  c.stall_check_seconds = 60;
  c.shm_min_bytes = 0;  // every allreduce through the transport under test
  c.test_ranks_per_host = w.per_host;
  c.test_hosts_round_robin = w.round_robin;
  return c;
}

// The library's makers of the two transports, in the library's order.
void shm_and_hier(const TransportContext& ctx, TransportRegistry* registry) {
  registry->add(make_shm_transport(ctx));
  registry->add(make_hier_transport(ctx));
}

// Waits (at most 60 s) for `h`; throws its failure.
void await(const std::shared_ptr<detail::HandleState>& h) {
  if (!h->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(60))) {
    throw std::runtime_error("'" + h->name() + "' did not complete within 60 s");
  }
  throw_if_error(h->status());
}

// Throws naming the first element of `got` (n of them) that differs from `want(i)` by more
// than `tolerance` (relative).
template <typename T, typename F>
void expect_each(const std::string& what, const T* got, int64_t n, F want, double tolerance = 0) {
  for (int64_t i = 0; i < n; ++i) {
    const double w = static_cast<double>(want(i)), g = static_cast<double>(got[i]);
    if (std::fabs(g - w) > tolerance * std::fabs(w)) {
      throw std::runtime_error(what + ": element " + std::to_string(i) + " is " +
                               std::to_string(g) + ", expected " + std::to_string(w));
    }
  }
}

// One allreduced tensor: its dtype, length and operator, and its buffer on this rank.
struct Reduced {
  DataType dtype;
  int64_t len;
  ReduceOp op;
  std::vector<unsigned char> bytes;
};

// Rank r's element i of tensor t: small integers, so sums are exact in every dtype.
double element(int r, int t, int64_t i) { return static_cast<double>((r + 1) * (i % 13 + t)); }

template <typename T>
void fill(Reduced* x, int rank, int t) {
  T* p = reinterpret_cast<T*>(x->bytes.data());
  for (int64_t i = 0; i < x->len; ++i) p[i] = static_cast<T>(element(rank, t, i));
}

template <typename T>
void check(const Reduced& x, int n, int t) {
  const T* p = reinterpret_cast<const T*>(x.bytes.data());
  const std::string what = "allreduce t" + std::to_string(t) + " (" + dtype_name(x.dtype) + ")";
  expect_each(what, p, x.len, [&](int64_t i) {
    double sum = 0, most = 0;
    for (int r = 0; r < n; ++r) {
      sum += element(r, t, i);
      most = std::max(most, element(r, t, i));
    }
    return x.op == ReduceOp::kMax ? most : x.op == ReduceOp::kAverage ? sum / n : sum;
  }, x.op == ReduceOp::kAverage ? 1e-6 : 0);
}

// Dispatches `F<T>` on the test's dtypes.
template <template <typename> class F, typename... A>
void on_dtype(DataType d, A&&... a) {
  switch (d) {
    case DataType::kFloat32: F<float>::run(a...); break;
    case DataType::kFloat64: F<double>::run(a...); break;
    case DataType::kInt32: F<int32_t>::run(a...); break;
    case DataType::kInt64: F<int64_t>::run(a...); break;
    default: throw std::logic_error("dtype not in the test");
  }
}
template <typename T>
struct Fill {
  static void run(Reduced* x, int rank, int t) { fill<T>(x, rank, t); }
};
template <typename T>
struct Check {
  static void run(const Reduced& x, int n, int t) { check<T>(x, n, t); }
};

const World kWorlds[] = {
    {2, 0, false, "shm, inproc"},
    {3, 0, false, "shm, inproc"},
    {4, 0, false, "shm, inproc"},
    {4, 2, false, "hier, inproc"},
    {4, 2, true, "hier, inproc"},
};

// Every world's sets, after `body(rank, sets)` ran on every rank: the registry is the expected
// one and no collective fell through to the "inproc" transport beyond `inproc_calls` per rank.
template <typename F>
void in_every_world(const Config& extra, uint64_t inproc_calls_shm, uint64_t inproc_calls_hier,
                    F body) {
  for (const World& w : kWorlds) {
    Config c = config_for(w);
    c.fusion_threshold_bytes = extra.fusion_threshold_bytes;
    c.test_shm_path = extra.test_shm_path;
    INFO(describe(w));
    InProcessSets sets(w.ranks, c, TransportMaker(shm_and_hier));
    const std::string err = on_ranks(w.ranks, [&](int rank) { body(rank, sets); });
    INFO(err);
    CHECK(err.empty());
    sets.shutdown();
    CHECK(sets.set(0).transports().describe() == w.transports);
    const bool hier = std::string(w.transports) == "hier, inproc";
    for (int r = 0; r < w.ranks; ++r) {
      CHECK(sets.data(r).calls() == (hier ? inproc_calls_hier : inproc_calls_shm));
    }
  }
}

}  // namespace

TEST_CASE("transports in process: shm and hier allreduce every element, fused or not", "[transports_in_process]") {
  const bool fuse = GENERATE(true, false);
  Config extra;
  extra.fusion_threshold_bytes = fuse ? extra.fusion_threshold_bytes : 0;
  // Lengths across the shared-memory chunk (1 MiB) and the single-copy sizes; the dtypes
  // and operators alternate.
  const int64_t kLens[] = {1, 7, 100, 1000, 4097, 70000, 3, 300000};
  const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                             DataType::kInt64};
  const int kTensors = 8;
  in_every_world(extra, 0, 0, [&](int rank, InProcessSets& sets) {
    const int n = sets.size();
    auto h = std::make_shared<detail::HandleState>("group", kTensors);
    std::vector<Reduced> xs(kTensors);
    std::vector<Entry> es;
    for (int t = 0; t < kTensors; ++t) {
      Reduced& x = xs[static_cast<size_t>(t)];
      x.dtype = kTypes[t % 4];
      x.len = kLens[t];
      const bool floating = x.dtype == DataType::kFloat32 || x.dtype == DataType::kFloat64;
      x.op = floating ? (t / 2 % 2 == 0 ? ReduceOp::kAverage : ReduceOp::kSum)
                      : (t / 2 % 2 == 1 ? ReduceOp::kMax : ReduceOp::kSum);
      x.bytes.resize(static_cast<size_t>(x.len) * dtype_size(x.dtype));
      on_dtype<Fill>(x.dtype, &x, rank, t);
      Entry e = entry(rank, OpType::kAllreduce, "ar." + std::to_string(t), x.bytes.data(),
                      x.dtype, {x.len}, h);
      e.request.reduce_op = x.op;
      e.request.group = "g";
      e.request.group_size = kTensors;
      es.push_back(std::move(e));
    }
    throw_if_error(enqueue(sets.set(rank), es));
    await(h);
    for (int t = 0; t < kTensors; ++t) on_dtype<Check>(xs[static_cast<size_t>(t)].dtype, xs[static_cast<size_t>(t)], n, t);
  });
}

TEST_CASE("transports in process: shm and hier allgather, broadcast, alltoall, reducescatter", "[transports_in_process]") {
  // The barrier is the one collective shm leaves to the next transport.
  in_every_world(Config(), 1, 0, [&](int rank, InProcessSets& sets) {
    const int n = sets.size();
    ProcessSetState& set = sets.set(rank);
    std::vector<std::shared_ptr<detail::HandleState>> hs;
    auto submit = [&](Entry e) {
      hs.push_back(testing::submit(set, std::move(e)));
      return hs.back();
    };
    // allgather: rank r contributes 1000 * (r + 1) rows of 3 int32s.
    const int64_t kRows = 1000;
    std::vector<int32_t> mine(static_cast<size_t>(kRows * (rank + 1) * 3));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = rank * 1000000 + static_cast<int32_t>(i);
    auto hg = submit(entry(rank, OpType::kAllgather, "ag", mine.data(), DataType::kInt32,
                                {kRows * (rank + 1), 3}, nullptr));
    // broadcast of 50000 doubles from the last rank.
    std::vector<double> bc(50000, rank);
    for (size_t i = 0; i < bc.size(); ++i) bc[i] = rank * 100000.0 + static_cast<double>(i);
    Entry eb = entry(rank, OpType::kBroadcast, "bc", bc.data(), DataType::kFloat64,
                                {50000}, nullptr);
    eb.request.root = n - 1;
    submit(std::move(eb));
    // alltoall: 500 * (d + 1) rows of 2 floats to each rank d.
    std::vector<int64_t> splits(static_cast<size_t>(n));
    int64_t rows = 0;
    for (int d = 0; d < n; ++d) rows += splits[static_cast<size_t>(d)] = 500 * (d + 1);
    std::vector<float> a2a(static_cast<size_t>(rows * 2));
    for (size_t i = 0; i < a2a.size(); ++i) a2a[i] = static_cast<float>(rank * 100000 + static_cast<int>(i));
    Entry ea = entry(rank, OpType::kAlltoall, "a2a", a2a.data(), DataType::kFloat32,
                                {rows, 2}, nullptr);
    ea.request.splits = splits;
    auto ha = submit(std::move(ea));
    // reducescatter (sum, and average) of 2000 n rows of 1.
    std::vector<float> rs(static_cast<size_t>(2000 * n));
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(rank + static_cast<int>(i % 97));
    auto hr = submit(entry(rank, OpType::kReducescatter, "rs", rs.data(), DataType::kFloat32,
                                {2000 * n, 1}, nullptr));
    Entry er = entry(rank, OpType::kReducescatter, "rs.avg", rs.data(),
                                DataType::kFloat32, {2000 * n, 1}, nullptr);
    er.request.reduce_op = ReduceOp::kAverage;
    auto hra = submit(std::move(er));
    submit(entry(rank, OpType::kBarrier, "bar", nullptr, DataType::kUInt8, {0}, nullptr));
    for (auto& h : hs) await(h);

    const Tensor& g = hg->results().at(0);
    int64_t at = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t count = kRows * (r + 1) * 3;
      expect_each("allgather block of rank " + std::to_string(r), g.data_as<int32_t>() + at,
                  count, [&](int64_t i) { return r * 1000000 + i; });
      at += count;
    }
    expect_each("broadcast", bc.data(), 50000,
                [&](int64_t i) { return (n - 1) * 100000.0 + static_cast<double>(i); });
    // From rank r this rank gets r's block for it: rows after r's blocks for ranks < this one.
    const Tensor& a = ha->results().at(0);
    int64_t row = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t before = 500 * rank * (rank + 1) / 2;  // rows r sent to ranks below this one
      expect_each("alltoall block from rank " + std::to_string(r), a.data_as<float>() + row * 2,
                  splits[static_cast<size_t>(rank)] * 2,
                  [&](int64_t i) { return static_cast<float>(r * 100000 + before * 2 + i); });
      row += splits[static_cast<size_t>(rank)];
    }
    if (ha->splits().at(0) != std::vector<int64_t>(static_cast<size_t>(n), splits[static_cast<size_t>(rank)])) {
      throw std::runtime_error("alltoall: the received splits are not " +
                               std::to_string(splits[static_cast<size_t>(rank)]) + " from each rank");
    }
    for (const auto& [h, average] : {std::make_pair(hr, false), std::make_pair(hra, true)}) {
      expect_each(average ? "reducescatter (average)" : "reducescatter", h->results().at(0).data_as<float>(),
                  2000, [&](int64_t i) {
                    double s = 0;
                    for (int r = 0; r < n; ++r) s += r + (2000 * rank + i) % 97;
                    return average ? s / n : s;
                  }, average ? 1e-6 : 0);
    }
  });
}

TEST_CASE("transports in process: shm and hier allgather and alltoall of large results",
          "[transports_in_process]") {
  // Results of kStreamCopyMinBytes and more are written with non-temporal stores
  // (kernels/host/stream_copy.h). The blocks have odd lengths, so they start and end off the
  // 64-byte lines the streamed body fills; both gather ways (two copies, one) are forced.
  const int way = GENERATE(1, 2);
  Config extra;
  extra.test_shm_path = way;
  INFO((way == 1 ? "two copies" : "one copy"));
  in_every_world(extra, 0, 0, [&](int rank, InProcessSets& sets) {
    const int n = sets.size();
    ProcessSetState& set = sets.set(rank);
    // allgather: rank r contributes 2^19 + 7 r + 3 int32s (2 MiB and a few): the result has
    // 4 MiB and more.
    auto rows_of = [](int r) { return (int64_t{1} << 19) + 7 * r + 3; };
    std::vector<int32_t> mine(static_cast<size_t>(rows_of(rank)));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = rank * 10000000 + static_cast<int32_t>(i);
    auto hg = testing::submit(set, entry(rank, OpType::kAllgather, "big.ag", mine.data(),
                                         DataType::kInt32, {rows_of(rank)}, nullptr));
    // alltoall: 300000 + 5 d + rank rows of one float to rank d.
    std::vector<int64_t> splits(static_cast<size_t>(n));
    int64_t rows = 0;
    for (int d = 0; d < n; ++d) rows += splits[static_cast<size_t>(d)] = 300000 + 5 * d + rank;
    std::vector<float> a2a(static_cast<size_t>(rows));
    for (size_t i = 0; i < a2a.size(); ++i) {
      a2a[i] = static_cast<float>(rank * 4000000 + static_cast<int>(i));
    }
    Entry ea = entry(rank, OpType::kAlltoall, "big.a2a", a2a.data(), DataType::kFloat32, {rows},
                     nullptr);
    ea.request.splits = splits;
    auto ha = testing::submit(set, std::move(ea));
    await(hg);
    await(ha);

    const Tensor& g = hg->results().at(0);
    int64_t at = 0;
    for (int r = 0; r < n; ++r) {
      expect_each("allgather block of rank " + std::to_string(r), g.data_as<int32_t>() + at,
                  rows_of(r), [&](int64_t i) { return r * 10000000 + i; });
      at += rows_of(r);
    }
    if (g.numel() != at) {
      throw std::runtime_error("allgather: " + std::to_string(g.numel()) + " elements");
    }
    // From rank r this rank gets r's rows for it: after the rows r sent to ranks below this one.
    const Tensor& a = ha->results().at(0);
    int64_t row = 0;
    for (int r = 0; r < n; ++r) {
      int64_t before = 0;
      for (int d = 0; d < rank; ++d) before += 300000 + 5 * d + r;
      expect_each("alltoall block from rank " + std::to_string(r), a.data_as<float>() + row,
                  300000 + 5 * rank + r,
                  [&](int64_t i) { return static_cast<float>(r * 4000000 + before + i); });
      row += 300000 + 5 * rank + r;
    }
    if (a.numel() != row) {
      throw std::runtime_error("alltoall: " + std::to_string(a.numel()) + " elements");
    }
  });
}
