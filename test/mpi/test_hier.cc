// Copyright horovod_cpp authors. The hierarchical CPU allreduce (transport/hier/) on one
// machine: HOROVOD_CPP_TEST_RANKS_PER_HOST=2 makes hosts of two consecutive ranks, so at 4
// ranks the set spans two hosts of two and allreduces take the shared-memory reduce-scatter,
// the MPI allreduce across hosts and the shared-memory allgather. At 2 and 3 ranks the same
// settings give one rank per host or unequal hosts: the transport declines and MPI runs.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {

double value(int r, int64_t i) { return static_cast<double>((i * 7 + r * 3) % 11); }

// The expected element i of an allreduce over `n` ranks of value(r, i) * pre, then op and
// post, in dtype `d` (the integers: truncation as the library defines it).
double expected(DataType d, ReduceOp op, int n, int64_t i, double pre, double post) {
  const bool fp = hvd::is_floating_point(d);
  auto in = [&](int r) { return fp ? value(r, i) * pre : std::trunc(value(r, i) * pre); };
  double acc = in(0);
  for (int r = 1; r < n; ++r) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += in(r); break;
      case ReduceOp::kMin: acc = std::min(acc, in(r)); break;
      case ReduceOp::kMax: acc = std::max(acc, in(r)); break;
      case ReduceOp::kProduct: acc *= in(r); break;
    }
  }
  if (d == DataType::kBool) return acc != 0 ? 1 : 0;
  if (op == ReduceOp::kAverage) acc = fp ? acc / n : static_cast<double>(static_cast<int64_t>(acc) / n);
  return fp ? acc * post : (post != 1.0 ? std::trunc(acc * post) : acc);
}

bool hier_expected(int n) { return n >= 4 && n % 2 == 0; }

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("hierarchical allreduce across test hosts: dtypes, ops, sizes, fusion, scaling",
          "[allreduce][hier]") {
  const std::string path = "/tmp/hvd_hier_timeline_" + std::to_string(getppid()) + ".json";
  {
    ScopedEnv env({{"HOROVOD_CPP_TEST_RANKS_PER_HOST", "2"}, {"HOROVOD_TIMELINE", path},
                   {"HOROVOD_CPP_SHM_CHUNK_BYTES", "8192"}});  // many shm rounds per step
    Session s;
    const int n = hvd::size(), me = hvd::rank();
    const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};
    // 1 and 3 elements: fewer than (or not a multiple of) the ranks per host, so some local
    // ranks own an empty share; 5,001: several rounds of the 8 KiB slots.
    for (int64_t len : {int64_t{1}, int64_t{3}, int64_t{5001}}) {
      for (DataType d : all_dtypes()) {
        for (ReduceOp op : ops) {
          if (d == DataType::kBool && op == ReduceOp::kAverage) continue;  // not defined
          // Products of up to 4 values <= 10 fit every type but the 1-byte ones.
          if (op == ReduceOp::kProduct && (len > 3 || hvd::dtype_size(d) == 1)) continue;
          Buffer b(d, {len});
          for (int64_t i = 0; i < len; ++i) b.set(i, value(me, i));
          hvd::AllreduceOptions o;
          o.op = op;
          hvd::allreduce("hier." + std::to_string(len) + "." + hvd::dtype_name(d) + "." +
                             hvd::reduce_op_name(op),
                         b.view(), o);
          int64_t bad = 0;
          for (int64_t i = 0; i < len; ++i) {
            const double want = expected(d, op, n, i, 1.0, 1.0);
            bad += std::fabs(b.get(i) - want) > 1e-2 * std::max(1.0, std::fabs(want));
          }
          INFO(len << " x " << hvd::dtype_name(d) << " " << hvd::reduce_op_name(op));
          CHECK(bad == 0);
        }
      }
    }
    // A fused group with prescale and postscale, out of place for one member.
    for (int step = 0; step < 3; ++step) {
      std::vector<Buffer> bufs;
      for (int64_t len : {int64_t{7}, int64_t{4099}, int64_t{1}, int64_t{20000}}) {
        bufs.emplace_back(DataType::kFloat64, std::vector<int64_t>{len});
        for (int64_t i = 0; i < len; ++i) bufs.back().set(i, value(me, i) + step);
      }
      std::vector<std::string> names;
      std::vector<hvd::TensorView> views;
      for (size_t k = 0; k < bufs.size(); ++k) {
        names.push_back("hier.group." + std::to_string(k));
        views.push_back(bufs[k].view());
      }
      hvd::AllreduceOptions o;
      o.op = ReduceOp::kAverage;
      o.prescale_factor = 0.5;
      o.postscale_factor = 3.0;
      hvd::grouped_allreduce(names, views, o);
      int64_t bad = 0;
      for (const Buffer& b : bufs) {
        for (int64_t i = 0; i < b.n(); ++i) {
          double sum = 0;
          for (int r = 0; r < n; ++r) sum += (value(r, i) + step) * 0.5;
          bad += std::fabs(b.get(i) - sum / n * 3.0) > 1e-9;
        }
      }
      CHECK(bad == 0);
    }
    // The set's allgather and broadcast take the same transport.
    int64_t x = me;
    hvd::Tensor g = hvd::allgather("hier.gather", hvd::TensorView(&x, DataType::kInt64, {1}));
    for (int r = 0; r < n; ++r) CHECK(g.data_as<int64_t>()[r] == r);
    for (int root = 0; root < n; ++root) {  // every root, so every local rank leads once
      std::vector<int32_t> bc(3000, me);
      hvd::broadcast("hier.bc." + std::to_string(root),
                     hvd::TensorView(bc.data(), DataType::kInt32, {3000}), root);
      CHECK(std::count(bc.begin(), bc.end(), root) == 3000);
    }
    // A process set of the even ranks: one rank of it per test host, so it declines there.
    std::vector<int> evens;
    for (int r = 0; r < n; r += 2) evens.push_back(r);
    hvd::ProcessSet even = hvd::add_process_set(evens);
    if (me % 2 == 0) {
      std::vector<float> v(1000, static_cast<float>(me));
      hvd::AllreduceOptions o;
      o.op = ReduceOp::kSum;
      o.process_set = even;
      hvd::allreduce("hier.evens", hvd::TensorView(v.data(), DataType::kFloat32, {1000}), o);
      float want = 0;
      for (int r : evens) want += static_cast<float>(r);
      CHECK(std::count(v.begin(), v.end(), want) == 1000);
    }
    hvd::remove_process_set(even);
  }
  // Which path ran: the timeline of rank 0 names the transport of every reduction.
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_rank == 0) {
    const std::string t = read_file(path);
    INFO("hierarchical path expected at " << world_size << " ranks: " << hier_expected(world_size));
    CHECK((t.find("\"HIER_allreduce\"") != std::string::npos) == hier_expected(world_size));
    CHECK((t.find("\"HIER_ALLREDUCE\"") != std::string::npos) == hier_expected(world_size));
    // The set's other collectives run through the same transport (over MPI) where it applies.
    CHECK((t.find("\"HIER_allgather\"") != std::string::npos) == hier_expected(world_size));
    CHECK((t.find("\"HIER_broadcast\"") != std::string::npos) == hier_expected(world_size));
    std::remove(path.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("HOROVOD_CPP_SHM_HIERARCHICAL=0 keeps sets that span hosts on MPI", "[allreduce][hier]") {
  const std::string path = "/tmp/hvd_hier_off_timeline_" + std::to_string(getppid()) + ".json";
  {
    ScopedEnv env({{"HOROVOD_CPP_TEST_RANKS_PER_HOST", "2"}, {"HOROVOD_TIMELINE", path},
                   {"HOROVOD_CPP_SHM_HIERARCHICAL", "0"}});
    Session s;
    const int n = hvd::size();
    std::vector<double> v(100, 1.0);
    hvd::AllreduceOptions o;
    o.op = ReduceOp::kSum;
    hvd::allreduce("hier.off", hvd::TensorView(v.data(), DataType::kFloat64, {100}), o);
    CHECK(std::count(v.begin(), v.end(), static_cast<double>(n)) == 100);
  }
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (world_rank == 0) {
    const std::string t = read_file(path);
    CHECK(t.find("HIER_") == std::string::npos);
    std::remove(path.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
