// Copyright horovod_cpp authors. Allreduce under mpirun: every dtype x dims 1-3 x every op,
// checked element by element against values each rank computes for all ranks itself.
#include <cmath>
#include <limits>
#include <memory>
#include <thread>

#include "test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {

// The value rank r contributes at element i for `op`: small integers, so every dtype holds
// every partial result exactly (products stay within int8 with 4 ranks).
double contribution(int r, int64_t i, DataType d, ReduceOp op) {
  if (d == DataType::kBool) return ((i + r) % 3) == 0 ? 1 : 0;
  if (op == ReduceOp::kProduct) return static_cast<double>(((i + r) % 2) + 1);
  double v = static_cast<double>((i * 7 + r * 13) % 31);
  if (is_signed_dtype(d)) v -= 10;
  return v;
}

double expected(int64_t i, DataType d, ReduceOp op, int n) {
  double acc = contribution(0, i, d, op);
  for (int r = 1; r < n; ++r) {
    const double v = contribution(r, i, d, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  if (d == DataType::kBool) {
    bool any = false, all = true;
    for (int r = 0; r < n; ++r) {
      any = any || contribution(r, i, d, op) != 0;
      all = all && contribution(r, i, d, op) != 0;
    }
    return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? all : any;
  }
  if (op == ReduceOp::kAverage) {
    if (hvd::is_floating_point(d)) return acc / n;
    return static_cast<double>(static_cast<int64_t>(acc) / n);  // truncation toward zero
  }
  return acc;
}

double tolerance(DataType d, double value) {
  switch (d) {
    case DataType::kFloat16: return 1e-3 * std::max(1.0, std::fabs(value)) + 1e-3;
    case DataType::kBFloat16: return 8e-3 * std::max(1.0, std::fabs(value));
    case DataType::kFloat32: return 1e-5 * std::max(1.0, std::fabs(value));
    case DataType::kFloat64: return 1e-12 * std::max(1.0, std::fabs(value));
    default: return 0;
  }
}

const std::vector<std::vector<int64_t>> kShapes = {{17}, {3, 5}, {2, 3, 4}};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                    ReduceOp::kMax, ReduceOp::kProduct};

struct Case {
  std::string name;
  DataType dtype;
  ReduceOp op;
  std::unique_ptr<Buffer> in, out;
  hvd::Handle handle;
};

// Submits every dtype x shape x op at once (in flight together, so they fuse), then checks.
void run_matrix(bool out_of_place, const std::string& tag) {
  const int n = hvd::size(), me = hvd::rank();
  std::vector<Case> cases;
  for (DataType d : all_dtypes()) {
    for (const auto& shape : kShapes) {
      for (ReduceOp op : kOps) {
        if (d == DataType::kBool && op == ReduceOp::kAverage) continue;  // rejected: tested apart
        Case c;
        c.name = tag + "." + hvd::dtype_name(d) + "." + hvd::shape_str(shape) + "." +
                 hvd::reduce_op_name(op);
        c.dtype = d;
        c.op = op;
        c.in = std::make_unique<Buffer>(d, shape);
        for (int64_t i = 0; i < c.in->n(); ++i) c.in->set(i, contribution(me, i, d, op));
        hvd::AllreduceOptions o;
        o.op = op;
        if (out_of_place) {
          c.out = std::make_unique<Buffer>(d, shape);
          c.handle = hvd::allreduce_async(c.name, c.in->view(), c.out->view(), o);
        } else {
          c.handle = hvd::allreduce_async(c.name, c.in->view(), o);
        }
        cases.push_back(std::move(c));
      }
    }
  }
  for (auto& c : cases) {
    if (!wait_ok(c.handle)) continue;
    const Buffer& result = out_of_place ? *c.out : *c.in;
    int bad = 0;
    for (int64_t i = 0; i < result.n(); ++i) {
      const double want = expected(i, c.dtype, c.op, n);
      const double got = result.get(i);
      if (std::fabs(got - want) > tolerance(c.dtype, want)) {
        if (bad++ < 3) FAIL_CHECK(c.name << "[" << i << "]: got " << got << ", expected " << want);
      }
    }
    CHECK(bad == 0);
    if (out_of_place) {  // the input is untouched
      int changed = 0;
      Buffer ref(c.dtype, c.in->shape);
      for (int64_t i = 0; i < ref.n(); ++i) ref.set(i, contribution(me, i, c.dtype, c.op));
      for (int64_t i = 0; i < ref.n(); ++i) changed += ref.get(i) != c.in->get(i);
      CHECK(changed == 0);
    }
  }
}

}  // namespace

TEST_CASE("allreduce: every dtype x dims 1-3 x every op, in place", "[allreduce]") {
  Session s;
  run_matrix(false, "inplace");
  // Second round with the same names: served by the response cache.
  run_matrix(false, "inplace");
}

TEST_CASE("allreduce: every dtype x dims 1-3 x every op, out of place", "[allreduce]") {
  Session s;
  run_matrix(true, "outofplace");
}

namespace {

// Sums of 8- and 16-bit integers that leave the type's range: they wrap like the type on every
// path (Open MPI's vectorized MPI_SUM saturates them: mpi_context.cc); min and max of uint16
// values past 32767 are unsigned.
template <typename T>
void check_small_int_sums(DataType d) {
  const int n = hvd::size(), me = hvd::rank();
  const int64_t count = 97;  // past any vector width
  using Lim = std::numeric_limits<T>;
  const int64_t lo = Lim::min(), span = static_cast<int64_t>(Lim::max()) - lo + 1;
  // Values in the upper part of the range (and, for signed types, its bottom too), so that
  // two ranks' sum overflows.
  auto value = [&](int r, int64_t i) {
    const int64_t k = (r * 7919 + i * 104729) % (span / 4);
    return static_cast<T>(((r + i) % 3 == 0 && Lim::is_signed) ? lo + k : Lim::max() - k);
  };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax}) {
    std::vector<T> buf(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) buf[static_cast<size_t>(i)] = value(me, i);
    hvd::AllreduceOptions o;
    o.op = op;
    const std::string name = std::string("wrap.") + hvd::dtype_name(d) + "." + hvd::reduce_op_name(op);
    wait_ok(hvd::allreduce_async(name, hvd::TensorView(buf.data(), d, {count}), o));
    int bad = 0;
    for (int64_t i = 0; i < count; ++i) {
      int64_t sum = 0, mn = value(0, i), mx = value(0, i);
      for (int r = 0; r < n; ++r) {
        sum += value(r, i);
        mn = std::min<int64_t>(mn, value(r, i));
        mx = std::max<int64_t>(mx, value(r, i));
      }
      // Wrapped into the type (two's complement for the signed ones).
      const T wrapped = static_cast<T>(static_cast<typename std::make_unsigned<T>::type>(
          static_cast<uint64_t>(sum)));
      int64_t want = wrapped;
      if (op == ReduceOp::kAverage) want = static_cast<int64_t>(wrapped) / n;  // toward zero
      if (op == ReduceOp::kMin) want = mn;
      if (op == ReduceOp::kMax) want = mx;
      const int64_t got = buf[static_cast<size_t>(i)];
      if (got != want && bad++ < 3) {
        FAIL_CHECK(name << "[" << i << "]: got " << got << ", expected " << want);
      }
    }
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("allreduce: 8- and 16-bit sums wrap like the type; uint16 is unsigned",
          "[allreduce]") {
  Session s;
  check_small_int_sums<int8_t>(DataType::kInt8);
  check_small_int_sums<uint8_t>(DataType::kUInt8);
  check_small_int_sums<int16_t>(DataType::kInt16);
  check_small_int_sums<uint16_t>(DataType::kUInt16);
}

TEST_CASE("allreduce: fusion and cache disabled give the same results", "[allreduce]") {
  ScopedEnv env({{"HOROVOD_FUSION_THRESHOLD", "0"}, {"HOROVOD_CACHE_CAPACITY", "0"}});
  Session s;
  run_matrix(false, "nofusion");
}

TEST_CASE("allreduce: a tiny cache that evicts while requests are pending", "[allreduce]") {
  ScopedEnv env({{"HOROVOD_CACHE_CAPACITY", "3"}, {"HOROVOD_FUSION_THRESHOLD", "256"}});
  Session s;
  for (int step = 0; step < 3; ++step) run_matrix(step % 2 == 0, "tinycache");
}

TEST_CASE("allreduce: prescale and postscale", "[allreduce]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  for (DataType d : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      Buffer b(d, {33});
      for (int64_t i = 0; i < b.n(); ++i) b.set(i, static_cast<double>((i % 5) + me));
      hvd::AllreduceOptions o;
      o.op = op;
      o.prescale_factor = 0.5;
      o.postscale_factor = 3.0;
      hvd::allreduce(std::string("scaled.") + hvd::dtype_name(d) + hvd::reduce_op_name(op), b.view(), o);
      for (int64_t i = 0; i < b.n(); ++i) {
        double sum = 0;
        for (int r = 0; r < n; ++r) sum += 0.5 * static_cast<double>((i % 5) + r);
        double want = sum * 3.0 / (op == ReduceOp::kAverage ? n : 1);
        CHECK(std::fabs(b.get(i) - want) <= tolerance(d, want) * 4);
      }
    }
  }
}

TEST_CASE("allreduce: a tensor larger than the reduction chunk", "[allreduce]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  const int64_t count = 3 * 1024 * 1024 + 17;  // 12 MiB of float32: three and a bit chunks
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<float>((i % 1000) * (me + 1));
  hvd::AllreduceOptions o;
  o.op = ReduceOp::kSum;
  hvd::allreduce("big", hvd::TensorView(v.data(), DataType::kFloat32, {count}), o);
  const double factor = n * (n + 1) / 2.0;
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) bad += v[static_cast<size_t>(i)] != static_cast<float>((i % 1000) * factor);
  CHECK(bad == 0);
}

TEST_CASE("allreduce: many async ops in flight; poll proves asynchrony", "[allreduce][async]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  // The last rank submits 300 ms late: everyone else's handles must still be pending, and
  // the submitting calls must have returned at once.
  const int late = n - 1;
  constexpr int kOps = 200;
  std::vector<std::vector<float>> data(kOps, std::vector<float>(64));
  std::vector<hvd::Handle> handles;
  if (me == late) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < kOps; ++k) {
    for (int i = 0; i < 64; ++i) data[k][i] = static_cast<float>(k + i * me);
    hvd::AllreduceOptions o;
    o.op = ReduceOp::kSum;
    handles.push_back(hvd::allreduce_async("inflight." + std::to_string(k),
                                           hvd::TensorView(data[k].data(), DataType::kFloat32, {64}), o));
  }
  const auto submit_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(submit_ms < 250);
  if (me != late) {
    int done = 0;
    for (auto& h : handles) done += h.poll();
    CHECK(done == 0);
  }
  for (auto& h : handles) wait_ok(h);
  for (int k = 0; k < kOps; ++k) {
    int bad = 0;
    for (int i = 0; i < 64; ++i) bad += data[k][i] != static_cast<float>(n * k + i * n * (n - 1) / 2);
    CHECK(bad == 0);
  }
}

TEST_CASE("allreduce: enqueues from several threads at once", "[allreduce][threads]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  constexpr int kThreads = 4, kPerThread = 50;
  std::vector<std::vector<double>> data(kThreads * kPerThread, std::vector<double>(10));
  std::vector<hvd::Handle> handles(data.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread submits in its own order, different on every rank.
      for (int j = 0; j < kPerThread; ++j) {
        const int k = t * kPerThread + ((j * 7 + me * 13) % kPerThread);  // a permutation
        for (int i = 0; i < 10; ++i) data[k][i] = k * 100.0 + i + me;
        hvd::AllreduceOptions o;
        o.op = ReduceOp::kSum;
        handles[k] = hvd::allreduce_async("thread." + std::to_string(k),
                                          hvd::TensorView(data[k].data(), DataType::kFloat64, {10}), o);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (auto& h : handles) wait_ok(h);
  int bad = 0;
  for (size_t k = 0; k < data.size(); ++k) {
    for (int i = 0; i < 10; ++i) bad += data[k][i] != n * (k * 100.0 + i) + n * (n - 1) / 2.0;
  }
  CHECK(bad == 0);
}

TEST_CASE("allreduce: names come and go; a name is reused the moment it completes",
          "[allreduce][names]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  hvd::AllreduceOptions o;
  o.op = ReduceOp::kSum;
  // Thousands of names used once each (like unnamed calls' numbered names): the table of
  // names is swept of idle ones as it grows, and every result is still right.
  constexpr int kRounds = 3, kNames = 1500;
  std::vector<std::vector<float>> data(kNames, std::vector<float>(4));
  std::vector<hvd::Handle> handles(kNames);
  for (int round = 0; round < kRounds; ++round) {
    for (int k = 0; k < kNames; ++k) {
      for (int i = 0; i < 4; ++i) data[k][i] = static_cast<float>(round * 10000 + k * 4 + i + me);
      handles[k] =
          hvd::allreduce_async("once." + std::to_string(round) + "." + std::to_string(k),
                               hvd::TensorView(data[k].data(), DataType::kFloat32, {4}), o);
    }
    int bad = 0;
    for (int k = 0; k < kNames; ++k) {
      wait_ok(handles[k]);
      for (int i = 0; i < 4; ++i) {
        bad += data[k][i] != static_cast<float>(n * (round * 10000 + k * 4 + i) + n * (n - 1) / 2);
      }
    }
    INFO("round " << round);
    CHECK(bad == 0);
  }
  // One name submitted again as soon as its handle completes: a timed wait leaves the cycles
  // to the background thread, so the new submission may come while the executor still holds
  // the old one's entry.
  int bad = 0;
  for (int step = 0; step < 300; ++step) {
    std::vector<double> v(3);
    for (int i = 0; i < 3; ++i) v[i] = step * 100.0 + i + me;
    wait_ok(hvd::allreduce_async("again", hvd::TensorView(v.data(), DataType::kFloat64, {3}), o));
    for (int i = 0; i < 3; ++i) bad += v[i] != n * (step * 100.0 + i) + n * (n - 1) / 2.0;
  }
  CHECK(bad == 0);
}

TEST_CASE("grouped allreduce: one handle, fused as a unit", "[allreduce][grouped]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  for (int step = 0; step < 3; ++step) {  // steps 2 and 3 hit the cache
    std::vector<std::vector<float>> data(5);
    std::vector<hvd::TensorView> views;
    std::vector<std::string> names;
    for (int k = 0; k < 5; ++k) {
      data[k].assign(static_cast<size_t>(k * 10 + 1), static_cast<float>(me + k));
      views.emplace_back(data[k].data(), DataType::kFloat32, std::vector<int64_t>{k * 10 + 1});
      names.push_back("group.t" + std::to_string(k));
    }
    hvd::Handle h = hvd::grouped_allreduce_async(names, views);  // default op: average
    wait_ok(h);
    for (int k = 0; k < 5; ++k) {
      int bad = 0;
      for (float x : data[k]) bad += std::fabs(x - ((n - 1) / 2.0f + k)) > 1e-6f;
      CHECK(bad == 0);
    }
  }
}
