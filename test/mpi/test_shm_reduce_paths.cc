// Copyright horovod_cpp authors. The measured choice between the shared-memory segments and
// MPI for large allreduces, reducescatters and broadcasts (transport/shm/gather_paths.h;
// allgathers and alltoalls: test_shm_gather_paths.cc), run under each way forced
// (HOROVOD_CPP_TEST_SHM_PATH=1: the fold, 2: MPI) and under random votes
// (HOROVOD_CPP_TEST_SHM_PATH_VOTES=1: every rank votes differently every cycle, so the ways
// mix call by call and only the cycle's agreement keeps the ranks together). test/mpi's
// CMakeLists sets HOROVOD_CPP_SHM_MEASURED_MIN_BYTES low, so that every size band chooses.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "test_util.h"
#include "timeline_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {

// Element counts: below the smallest band (4 KiB in the tests' settings) for the narrow
// dtypes, then every band.
const int64_t kCounts[] = {1500, 5000, 20000, 80000};

// Rank r's element i (small integers: sums, products and their scaled values are exact or
// within the tolerance in every dtype used).
double contribution(int r, int64_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return static_cast<double>(((i + r) % 2) + 1);
  return static_cast<double>((i * 7 + r * 3) % 11);
}

double fold(int64_t i, ReduceOp op, int n, double pre) {
  double acc = contribution(0, i, op) * pre;
  for (int r = 1; r < n; ++r) {
    const double v = contribution(r, i, op) * pre;
    switch (op) {
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      default:
        acc += v;
        break;
    }
  }
  return op == ReduceOp::kAverage ? acc / n : acc;
}

bool close(double got, double want) {
  return std::fabs(got - want) <= 1e-2 * std::max(1.0, std::fabs(want));
}

struct Case {
  std::string name;
  DataType dtype;
  ReduceOp op;
  double pre, post;
  std::unique_ptr<Buffer> buf;
  hvd::Handle handle;
};

// Submits `fused` allreduces of every dtype x op x count at once (they fuse into batches),
// waits, and checks every element of every one.
void allreduce_round(const std::string& tag, int repeats) {
  const int n = hvd::size(), me = hvd::rank();
  for (int rep = 0; rep < repeats; ++rep) {
    std::vector<Case> cases;
    for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kFloat16,
                       DataType::kBFloat16}) {
      const bool fp = hvd::is_floating_point(d);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct}) {
        if (!fp && op == ReduceOp::kAverage) continue;
        // Prescale and postscale (floats only) with the sums; 16-bit products stay small.
        const bool scaled = fp && (op == ReduceOp::kSum || op == ReduceOp::kAverage);
        for (int64_t count : kCounts) {
          if (op == ReduceOp::kProduct && count > 20000) continue;
          Case c;
          c.name = tag + "." + hvd::dtype_name(d) + "." + hvd::reduce_op_name(op) + "." +
                   std::to_string(count);
          c.dtype = d;
          c.op = op;
          c.pre = scaled ? 0.5 : 1.0;
          c.post = scaled ? 4.0 : 1.0;
          c.buf = std::make_unique<Buffer>(d, hvd::Shape{count});
          for (int64_t i = 0; i < count; ++i) c.buf->set(i, contribution(me, i, op));
          hvd::AllreduceOptions o;
          o.op = op;
          o.prescale_factor = c.pre;
          o.postscale_factor = c.post;
          c.handle = hvd::allreduce_async(c.name, c.buf->view(), o);
          cases.push_back(std::move(c));
        }
      }
    }
    for (Case& c : cases) {
      if (!wait_ok(c.handle)) continue;
      int64_t bad = 0;
      for (int64_t i = 0; i < c.buf->n(); ++i) {
        const double want = fold(i, c.op, n, c.pre) * c.post;
        const double got = c.buf->get(i);
        if (!close(got, want) && bad++ < 3) {
          FAIL_CHECK(c.name << "[" << i << "]: got " << got << ", expected " << want);
        }
      }
      CHECK(bad == 0);
    }
  }
}

// One reducescatter of `rows` x `cols` per dtype and op; every element of the result checked.
void reducescatter_round(const std::string& tag, int repeats) {
  const int n = hvd::size(), me = hvd::rank();
  for (int rep = 0; rep < repeats; ++rep) {
    for (DataType d :
         {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kBFloat16}) {
      const bool fp = hvd::is_floating_point(d);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        if (!fp && op == ReduceOp::kAverage) continue;
        for (int64_t cols : {int64_t{300}, int64_t{5000}}) {
          const int64_t rows = 4 * n + 1;  // uneven blocks
          const std::string name = tag + "." + hvd::dtype_name(d) + "." + hvd::reduce_op_name(op) +
                                   "." + std::to_string(cols);
          INFO(name);
          Buffer in(d, {rows, cols});
          for (int64_t i = 0; i < in.n(); ++i) in.set(i, contribution(me, i, op));
          hvd::ReducescatterOptions o;
          o.op = op;
          o.prescale_factor = fp ? 0.5 : 1.0;
          o.postscale_factor = fp ? 4.0 : 1.0;
          hvd::Tensor out = hvd::reducescatter(name, in.view(), o);
          int64_t first = 0;
          for (int r = 0; r < me; ++r) first += rows / n + (r < rows % n ? 1 : 0);
          const int64_t mine = rows / n + (me < rows % n ? 1 : 0);
          REQUIRE(out.shape() == hvd::Shape{mine, cols});
          Buffer got(d, out.shape());
          std::memcpy(got.bytes.data(), out.data(), got.bytes.size());
          int64_t bad = 0;
          for (int64_t i = 0; i < got.n(); ++i) {
            const double want =
                fold(first * cols + i, op, n, o.prescale_factor) * o.postscale_factor;
            if (!close(got.get(i), want) && bad++ < 3) {
              FAIL_CHECK(name << "[" << i << "]: got " << got.get(i) << ", expected " << want);
            }
          }
          CHECK(bad == 0);
        }
      }
    }
  }
}

// Broadcasts of every band from each root; every element checked.
void broadcast_round(const std::string& tag, int repeats) {
  const int n = hvd::size(), me = hvd::rank();
  for (int rep = 0; rep < repeats; ++rep) {
    for (int64_t count : kCounts) {
      for (int root = 0; root < n; ++root) {
        const std::string name = tag + "." + std::to_string(count) + ".root" + std::to_string(root);
        INFO(name);
        Buffer b(DataType::kFloat32, {count});
        for (int64_t i = 0; i < count; ++i) b.set(i, contribution(me, i, ReduceOp::kSum));
        hvd::broadcast(name, b.view(), root);
        int64_t bad = 0;
        for (int64_t i = 0; i < count; ++i) {
          const double want = contribution(root, i, ReduceOp::kSum);
          if (b.get(i) != want && bad++ < 3) {
            FAIL_CHECK(name << "[" << i << "]: got " << b.get(i) << ", expected " << want);
          }
        }
        CHECK(bad == 0);
      }
    }
  }
}

}  // namespace

TEST_CASE("shm paths: large allreduces, every dtype and op, scaled, fused, by every way",
          "[shm_paths]") {
  Session s;
  allreduce_round("paths.ar", 6);  // several calls of each class: explored and agreed ways
}

TEST_CASE("shm paths: large reducescatters, uneven blocks, scaled, by every way", "[shm_paths]") {
  Session s;
  reducescatter_round("paths.rs", 5);
}

TEST_CASE("shm paths: large broadcasts from every root, by every way", "[shm_paths]") {
  Session s;
  broadcast_round("paths.bc", 5);
}

TEST_CASE("shm paths: a forced way is the way every call takes", "[shm_paths]") {
  const char* forced = std::getenv("HOROVOD_CPP_TEST_SHM_PATH");
  const int way = forced ? std::atoi(forced) : 0;
  if (way == 0) return;  // the measured choice: which way a call takes is not fixed
  const std::string path = "/tmp/hvd_shm_paths_" + std::to_string(getppid()) + ".json";
  int ranks = 0;
  {
    ScopedEnv env({{"HOROVOD_TIMELINE", path}});
    Session s;
    const int me = hvd::rank();
    ranks = hvd::size();
    std::vector<int32_t> v(20000);
    std::vector<float> f(20000, 1.0f);
    for (int k = 0; k < 5; ++k) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(me + i % 5);
      hvd::AllreduceOptions o;
      o.op = ReduceOp::kSum;
      hvd::allreduce("paths.forced.ar", hvd::TensorView(v.data(), DataType::kInt32, {20000}), o);
      // Floats leave the fold only at two ranks (ShmTransport: the same bits as the fold).
      hvd::allreduce("paths.forced.float", hvd::TensorView(f.data(), DataType::kFloat32, {20000}),
                     o);
      hvd::ReducescatterOptions r;
      r.op = ReduceOp::kSum;
      hvd::reducescatter("paths.forced.rs", hvd::TensorView(v.data(), DataType::kInt32, {4, 5000}),
                         r);
      hvd::broadcast("paths.forced.bc", hvd::TensorView(f.data(), DataType::kFloat32, {20000}), 0);
      // Uneven blocks: every rank takes the same way whatever its share.
      const int64_t rows = 1000 * (me + 1);
      hvd::allgather("paths.forced.ag", hvd::TensorView(v.data(), DataType::kInt32, {rows, 5}));
      std::vector<int64_t> splits(static_cast<size_t>(ranks), 0);
      splits[0] = rows;
      hvd::alltoall("paths.forced.a2a", hvd::TensorView(v.data(), DataType::kInt32, {rows, 5}),
                    splits);
    }
  }
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (world_rank == 0) {  // the timeline is rank 0's
    nlohmann::json events;
    REQUIRE_NOTHROW(events = read_json(path));
    const auto ar = phases_of(events, "paths.forced.ar");
    const auto rs = phases_of(events, "paths.forced.rs");
    const auto bc = phases_of(events, "paths.forced.bc");
    const auto ag = phases_of(events, "paths.forced.ag");
    const auto a2a = phases_of(events, "paths.forced.a2a");
    std::string seen;
    for (const auto* p : {&ar, &rs, &bc, &ag, &a2a}) {
      for (const std::string& x : *p) seen += x + " ";
      seen += "| ";
    }
    INFO("way " << way
                << "; phases of the allreduce | reducescatter | broadcast | allgather | alltoall: "
                << seen);
    CHECK(ar.count("SHM_ALLREDUCE") == (way == 1 ? 1u : 0u));
    CHECK(ar.count("MPI_allreduce") == (way == 2 ? 1u : 0u));
    CHECK(rs.count("SHM_REDUCESCATTER") == (way == 1 ? 1u : 0u));
    CHECK(rs.count("MPI_reducescatter") == (way == 2 ? 1u : 0u));
    CHECK(bc.count("SHM_BROADCAST") == (way == 1 ? 1u : 0u));
    CHECK(bc.count("MPI_broadcast") == (way == 2 ? 1u : 0u));
    CHECK(ag.count("SHM_ALLGATHER") == (way == 1 ? 1u : 0u));
    CHECK(ag.count("MPI_allgather") == (way == 2 ? 1u : 0u));
    CHECK(a2a.count("SHM_ALLTOALL") == (way == 1 ? 1u : 0u));
    CHECK(a2a.count("MPI_alltoall") == (way == 2 ? 1u : 0u));
    const bool float_mpi = way == 2 && ranks == 2;
    const auto fl = phases_of(events, "paths.forced.float");
    CHECK(fl.count("SHM_ALLREDUCE") == (float_mpi ? 0u : 1u));
    CHECK(fl.count("MPI_allreduce") == (float_mpi ? 1u : 0u));
    std::remove(path.c_str());
  }
}
