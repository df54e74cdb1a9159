// Copyright horovod_cpp authors. Fault injection: rank 0 sends corrupted responses.
//
//   mpirun -np N hvd_corrupt MODE
// Every rank sets HOROVOD_CPP_TEST_CORRUPT_RESPONSE=MODE before init (rank 0 acts on it:
// coordination/test_faults.h), then runs one of each collective on a tensor named
// "hvd_corrupt.<op>", in order, and after each a plain allreduce. A collective that MODE
// changes must fail on every rank with an error naming it and saying that rank 0's response
// does not match, its tensor untouched; one that MODE leaves alone must give the right
// result; and every allreduce after must be right. Every rank checks every element itself and
// all ranks agree on the verdict (exit 0 only when it holds everywhere).
#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "checked_allreduce.h"
#include "horovod_cpp/horovod_cpp.h"

namespace {

int g_rank = 0, g_size = 1;
bool g_ok = true;

void fail(const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", g_rank, what.c_str());
  g_ok = false;
}

// Which collectives MODE changes (test_faults.h).
bool corrupts(const std::string& mode, const std::string& op) {
  if (mode == "shape" || mode == "dtype" || mode == "op") return true;
  if (mode == "reduce") return op == "allreduce" || op == "reducescatter";
  if (mode == "root") return op == "broadcast";
  if (mode == "scalar" || mode == "first_dim") return op == "allgather" || op == "alltoall";
  if (mode == "splits") return op == "alltoall";
  return false;
}

// Runs `run` (collective `op` on "hvd_corrupt.<op>"), which checks its own result; when MODE
// corrupts it, it must fail instead, and `untouched()` must still hold for its tensor.
void expect(const std::string& mode, const std::string& op, const std::function<void()>& run,
            const std::function<bool()>& untouched) {
  const std::string name = "hvd_corrupt." + op;
  const bool refused = corrupts(mode, op);
  try {
    run();
    if (refused) fail("'" + name + "' ran, though rank 0 corrupted its response (" + mode + ")");
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (!refused) {
      fail("'" + name + "' failed: " + msg);
    } else if (msg.find("'" + name + "': rank 0's response does not match") == std::string::npos) {
      fail("'" + name + "' failed with an unexpected message: " + msg);
    } else {
      if (!untouched()) fail("'" + name + "' was refused, but its tensor was written");
      if (g_rank == 0)
        std::printf("%s %s: refused on every rank: %s\n", mode.c_str(), op.c_str(), msg.c_str());
    }
  }
  if (!hvd_fault::checked_allreduce("after." + op, 1000)) g_ok = false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hvd_corrupt MODE\n");
    return 2;
  }
  const std::string mode = argv[1];
  setenv("HOROVOD_CPP_TEST_CORRUPT_RESPONSE", mode.c_str(), 1);
  hvd::init();
  g_rank = hvd::rank();
  g_size = hvd::size();
  const int n = g_size;
  const auto f32 = hvd::DataType::kFloat32;
  const auto all_equal = [](const std::vector<float>& v, float x) {
    for (float e : v) {
      if (e != x) return false;
    }
    return true;
  };
  try {
    // allreduce: 6 floats of value rank + i.
    std::vector<float> a(6);
    for (int i = 0; i < 6; ++i) a[static_cast<size_t>(i)] = static_cast<float>(g_rank + i);
    const std::vector<float> a0 = a;
    hvd::AllreduceOptions sum;
    sum.op = hvd::ReduceOp::kSum;
    expect(
        mode, "allreduce",
        [&] {
          hvd::allreduce("hvd_corrupt.allreduce", hvd::TensorView(a.data(), f32, {6}), sum);
          for (int i = 0; i < 6; ++i) {
            if (a[static_cast<size_t>(i)] != static_cast<float>(n * (n - 1) / 2 + n * i)) {
              fail("allreduce element " + std::to_string(i));
            }
          }
        },
        [&] { return a == a0; });

    // allgather: rank r contributes r + 1 rows of 3 floats, each = r.
    std::vector<float> g(static_cast<size_t>(3 * (g_rank + 1)), static_cast<float>(g_rank));
    expect(
        mode, "allgather",
        [&] {
          hvd::Tensor t = hvd::allgather("hvd_corrupt.allgather",
                                         hvd::TensorView(g.data(), f32, {g_rank + 1, 3}));
          if (t.shape() != hvd::Shape{n * (n + 1) / 2, 3}) fail("allgather shape");
          const float* p = t.data_as<float>();
          int64_t at = 0;
          for (int r = 0; r < n; ++r) {
            for (int k = 0; k < 3 * (r + 1); ++k, ++at) {
              if (p[at] != static_cast<float>(r)) fail("allgather element " + std::to_string(at));
            }
          }
        },
        [&] { return all_equal(g, static_cast<float>(g_rank)); });

    // broadcast from rank 0: 8 floats, 42 at the root.
    const float bfill = static_cast<float>(g_rank == 0 ? 42 : g_rank);
    std::vector<float> b(8, bfill);
    expect(
        mode, "broadcast",
        [&] {
          hvd::broadcast("hvd_corrupt.broadcast", hvd::TensorView(b.data(), f32, {8}), 0);
          if (!all_equal(b, 42.0f)) fail("broadcast element");
        },
        [&] { return all_equal(b, bfill); });

    // alltoall: 2 rows of 2 floats to each rank, valued 100 * sender + receiver.
    std::vector<float> t(static_cast<size_t>(4 * n));
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < 4; ++k)
        t[static_cast<size_t>(4 * j + k)] = static_cast<float>(100 * g_rank + j);
    }
    const std::vector<float> t0 = t;
    expect(
        mode, "alltoall",
        [&] {
          hvd::AlltoallResult res =
              hvd::alltoall("hvd_corrupt.alltoall", hvd::TensorView(t.data(), f32, {2 * n, 2}),
                            std::vector<int64_t>(static_cast<size_t>(n), 2));
          if (res.output.shape() != hvd::Shape{2 * n, 2}) fail("alltoall shape");
          const float* p = res.output.data_as<float>();
          for (int j = 0; j < n; ++j) {
            for (int k = 0; k < 4; ++k) {
              if (p[4 * j + k] != static_cast<float>(100 * j + g_rank)) fail("alltoall element");
            }
          }
        },
        [&] { return t == t0; });

    // reducescatter (sum): 2n rows of 2 floats, each = rank + 1.
    std::vector<float> s(static_cast<size_t>(4 * n), static_cast<float>(g_rank + 1));
    hvd::ReducescatterOptions rs;
    rs.op = hvd::ReduceOp::kSum;
    expect(
        mode, "reducescatter",
        [&] {
          hvd::Tensor out = hvd::reducescatter("hvd_corrupt.reducescatter",
                                               hvd::TensorView(s.data(), f32, {2 * n, 2}), rs);
          if (out.shape() != hvd::Shape{2, 2}) fail("reducescatter shape");
          const float* p = out.data_as<float>();
          for (int k = 0; k < 4; ++k) {
            if (p[k] != static_cast<float>(n * (n + 1) / 2)) fail("reducescatter element");
          }
        },
        [&] { return all_equal(s, static_cast<float>(g_rank + 1)); });
  } catch (const std::exception& e) {
    fail(std::string("unexpected: ") + e.what());
  }
  int mine = g_ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  hvd::shutdown();
  if (g_rank == 0)
    std::printf("mode %s with %d ranks: %s\n", mode.c_str(), n, all ? "ok" : "FAILED");
  return all ? 0 : 1;
}
