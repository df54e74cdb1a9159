// Copyright horovod_cpp authors. The nccl-tests style size sweep of hvd_bench.
//
// Sizes follow nccl-tests: allreduce and broadcast move `size` bytes per rank; allgather's
// size is its output (size/n per rank in); alltoall's and reducescatter's size is the input of
// one rank. Every collective is float32, seeded by rank with small integers, so that each rank
// can compute the exact expected result itself (sums of small integers are exact in float).
//
// alltoall and reducescatter are timed for raw MPI always, and for horovod_cpp when its API has
// them: CMake defines HVD_BENCH_HAVE_ALLTOALL / HVD_BENCH_HAVE_REDUCESCATTER when the calls in
// ours_alltoall() / ours_reducescatter() below compile against horovod_cpp/api.h.
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks.h"
#include "horovod_cpp/horovod_cpp.h"

namespace bench {
namespace {

using Buf = std::shared_ptr<std::vector<float>>;

Buf make_buf(int64_t n) { return std::make_shared<std::vector<float>>(static_cast<size_t>(n)); }

hvd::TensorView view(const Buf& b) {
  return hvd::TensorView(b->data(), hvd::DataType::kFloat32,
                         {static_cast<int64_t>(b->size())});
}

/// The value rank r contributes at element i: small integers, exact when summed.
float seed(int r, int64_t i) { return static_cast<float>((r * 7 + i * 3) % 31); }
/// alltoall: what rank r sends to peer p at element i of that peer's block.
float seed_a2a(int r, int p, int64_t i) { return static_cast<float>((r * 5 + p * 3 + i) % 29); }

int64_t count_wrong(const float* got, int64_t n, const std::function<float(int64_t)>& want) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (got[i] != want(i)) ++wrong;
  }
  return wrong;
}

/// One collective at one size: ours and MPI's step, and their checks.
struct Case {
  int64_t bytes = 0;  ///< the size column (nccl-tests meaning)
  int64_t count = 0;  ///< float32 elements of that size
  std::function<void()> ours, mpi;
  std::function<int64_t()> check_ours, check_mpi;  ///< fill, run once, count wrong elements
};

#ifdef HVD_BENCH_HAVE_ALLTOALL
hvd::Tensor ours_alltoall(const std::string& name, hvd::TensorView in) {
  return hvd::alltoall_async(name, in).result();
}
#endif
#ifdef HVD_BENCH_HAVE_REDUCESCATTER
hvd::Tensor ours_reducescatter(const std::string& name, hvd::TensorView in) {
  hvd::ReducescatterOptions sum;
  sum.op = hvd::ReduceOp::kSum;
  return hvd::reducescatter_async(name, in, sum).result();
}
#endif

bool ours_available(const std::string& op) {
  if (op == "alltoall") {
#ifdef HVD_BENCH_HAVE_ALLTOALL
    return true;
#else
    return false;
#endif
  }
  if (op == "reducescatter") {
#ifdef HVD_BENCH_HAVE_REDUCESCATTER
    return true;
#else
    return false;
#endif
  }
  return op == "allreduce" || op == "allgather" || op == "broadcast";
}

double bus_factor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;  // allgather, reducescatter, alltoall
}

Case make_case(const std::string& op, int64_t bytes, MPI_Comm comm, bool corrupt) {
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  const std::string name = "sweep." + op + "." + std::to_string(bytes);
  Case c;
  // Damages one element of our result on rank 0 (testing the check itself).
  auto damage = [corrupt, rank](float* p) {
    if (corrupt && rank == 0) p[0] += 1.0f;
  };

  if (op == "allreduce" || op == "broadcast") {
    const int64_t cnt = std::max<int64_t>(1, bytes / 4);
    c.count = cnt;
    c.bytes = cnt * 4;
    Buf ob = make_buf(cnt), mb = make_buf(cnt);
    const bool ar = op == "allreduce";
    auto fill = [=](const Buf& b) {
      for (int64_t i = 0; i < cnt; ++i) (*b)[i] = ar || rank == 0 ? seed(rank, i) : -1.0f;
    };
    auto want = [=](int64_t i) {
      if (!ar) return seed(0, i);
      float s = 0;
      for (int r = 0; r < n; ++r) s += seed(r, i);
      return s;
    };
    hvd::AllreduceOptions sum;
    sum.op = hvd::ReduceOp::kSum;
    if (ar) {
      c.ours = [=] { hvd::allreduce_async(name, view(ob), sum).wait(); };
      c.mpi = [=] {
        MPI_Allreduce(MPI_IN_PLACE, mb->data(), static_cast<int>(cnt), MPI_FLOAT, MPI_SUM, comm);
      };
    } else {
      c.ours = [=] { hvd::broadcast_async(name, view(ob), 0).wait(); };
      c.mpi = [=] { MPI_Bcast(mb->data(), static_cast<int>(cnt), MPI_FLOAT, 0, comm); };
    }
    c.check_ours = [=, ours = c.ours] {
      fill(ob);
      ours();
      damage(ob->data());
      return count_wrong(ob->data(), cnt, want);
    };
    c.check_mpi = [=, mpi = c.mpi] {
      fill(mb);
      mpi();
      return count_wrong(mb->data(), cnt, want);
    };
  } else if (op == "allgather" || op == "alltoall" || op == "reducescatter") {
    // per = elements per rank block; the input of a rank is per (allgather) or per*n.
    const int64_t per = std::max<int64_t>(1, bytes / 4 / n);
    c.count = per * n;
    c.bytes = per * n * 4;
    const int64_t in_n = op == "allgather" ? per : per * n;
    const int64_t out_n = op == "reducescatter" ? per : per * n;
    Buf oin = make_buf(in_n), min = make_buf(in_n), mout = make_buf(out_n);
    auto holder = std::make_shared<hvd::Tensor>();  // our last result
    std::function<float(int64_t)> want;
    std::function<void(const Buf&)> fill;
    if (op == "allgather") {
      fill = [=](const Buf& b) { for (int64_t i = 0; i < per; ++i) (*b)[i] = seed(rank, i); };
      want = [=](int64_t j) { return seed(static_cast<int>(j / per), j % per); };
      c.mpi = [=] {
        MPI_Allgather(min->data(), static_cast<int>(per), MPI_FLOAT, mout->data(),
                      static_cast<int>(per), MPI_FLOAT, comm);
      };
      c.ours = [=] { *holder = hvd::allgather_async(name, view(oin)).result(); };
    } else if (op == "alltoall") {
      fill = [=](const Buf& b) {
        for (int64_t j = 0; j < per * n; ++j) (*b)[j] = seed_a2a(rank, static_cast<int>(j / per), j % per);
      };
      want = [=](int64_t j) { return seed_a2a(static_cast<int>(j / per), rank, j % per); };
      c.mpi = [=] {
        MPI_Alltoall(min->data(), static_cast<int>(per), MPI_FLOAT, mout->data(),
                     static_cast<int>(per), MPI_FLOAT, comm);
      };
#ifdef HVD_BENCH_HAVE_ALLTOALL
      c.ours = [=] { *holder = ours_alltoall(name, view(oin)); };
#endif
    } else {
      fill = [=](const Buf& b) { for (int64_t j = 0; j < per * n; ++j) (*b)[j] = seed(rank, j); };
      want = [=](int64_t i) {
        float s = 0;
        for (int r = 0; r < n; ++r) s += seed(r, rank * per + i);
        return s;
      };
      c.mpi = [=] {
        MPI_Reduce_scatter_block(min->data(), mout->data(), static_cast<int>(per), MPI_FLOAT,
                                 MPI_SUM, comm);
      };
#ifdef HVD_BENCH_HAVE_REDUCESCATTER
      c.ours = [=] { *holder = ours_reducescatter(name, view(oin)); };
#endif
    }
    if (c.ours) {
      c.check_ours = [=, ours = c.ours] {
        fill(oin);
        ours();
        if (holder->numel() != out_n) return out_n;  // wrong shape: every element is wrong
        float* got = holder->data_as<float>();
        damage(got);
        return count_wrong(got, out_n, want);
      };
    }
    c.check_mpi = [=, mpi = c.mpi] {
      fill(min);
      mpi();
      return count_wrong(mout->data(), out_n, want);
    };
  }
  return c;
}

}  // namespace

int64_t run_sweep(const Options& opts, MPI_Comm comm, Json* out) {
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  int64_t total_wrong = 0;
  for (const std::string& op : opts.ops) {
    if (op != "allreduce" && op != "allgather" && op != "broadcast" && op != "alltoall" &&
        op != "reducescatter") {
      if (rank == 0) std::fprintf(stderr, "hvd_bench: unknown op '%s' skipped\n", op.c_str());
      continue;
    }
    const bool have_ours = ours_available(op);
    const double bf = bus_factor(op, n);
    if (rank == 0) {
      std::printf("\n# %s (float32%s), %d ranks, busbw = algbw * %s%s\n", op.c_str(),
                  op == "allreduce" || op == "reducescatter" ? ", sum" : "", n,
                  op == "allreduce" ? "2(n-1)/n" : op == "broadcast" ? "1" : "(n-1)/n",
                  have_ours ? "" : "  [not in horovod_cpp/api.h yet: raw MPI only]");
      std::printf("# %10s %10s | %10s %8s %8s %6s | %10s %8s %8s %6s | %7s\n", "size", "count",
                  "hvd us", "algbw", "busbw", "#wrong", "MPI us", "algbw", "busbw", "#wrong",
                  "hvd/MPI");
    }
    Json rows = Json::array();
    for (double b = static_cast<double>(opts.min_bytes); b <= static_cast<double>(opts.max_bytes);
         b *= opts.factor) {
      Case c = make_case(op, static_cast<int64_t>(b), comm, opts.corrupt);
      int64_t wrong_ours = -1, wrong_mpi = -1;
      if (opts.check) {
        if (c.check_ours) wrong_ours = sum_over_ranks(comm, c.check_ours());
        wrong_mpi = sum_over_ranks(comm, c.check_mpi());
        total_wrong += std::max<int64_t>(0, wrong_ours) + std::max<int64_t>(0, wrong_mpi);
      }
      int warmup = 0, iters = 0;
      auto_iters(c.bytes, &warmup, &iters);
      if (opts.iters > 0) iters = opts.iters;
      if (opts.warmup > 0) warmup = opts.warmup;
      std::vector<Variant> vs;
      if (c.ours) vs.push_back({"hvd", c.ours});
      vs.push_back({"mpi", c.mpi});
      const std::vector<Stats> st = measure_interleaved(comm, vs, warmup, iters);
      const Stats* so = c.ours ? &st[0] : nullptr;
      const Stats& sm = st.back();
      if (rank == 0) {
        auto alg = [&](const Stats& s) { return static_cast<double>(c.bytes) / s.median_s / 1e9; };
        char ours_col[64] = "       n/a      n/a      n/a    n/a";
        if (so) {
          std::snprintf(ours_col, sizeof ours_col, "%10.2f %8.3f %8.3f %6lld", so->median_s * 1e6,
                        alg(*so), alg(*so) * bf, static_cast<long long>(wrong_ours));
        }
        char ratio[16] = "    n/a";
        if (so) std::snprintf(ratio, sizeof ratio, "%7.2f", so->median_s / sm.median_s);
        std::printf("  %10lld %10lld | %s | %10.2f %8.3f %8.3f %6lld | %s\n",
                    static_cast<long long>(c.bytes), static_cast<long long>(c.count), ours_col,
                    sm.median_s * 1e6, alg(sm), alg(sm) * bf, static_cast<long long>(wrong_mpi),
                    ratio);
        std::fflush(stdout);
        Json row = Json::object();
        row.set("bytes", static_cast<double>(c.bytes)).set("count", static_cast<double>(c.count));
        if (so) {
          Json j = stats_json(*so, static_cast<double>(c.bytes), bf);
          j.set("wrong", static_cast<double>(wrong_ours));
          row.set("hvd", std::move(j));
        }
        Json j = stats_json(sm, static_cast<double>(c.bytes), bf);
        j.set("wrong", static_cast<double>(wrong_mpi));
        row.set("mpi", std::move(j));
        rows.push(std::move(row));
      }
    }
    if (rank == 0) {
      Json o = Json::object();
      o.set("op", op).set("bus_factor", bf).set("hvd_available", have_ours ? 1.0 : 0.0);
      o.set("rows", std::move(rows));
      out->push(std::move(o));
    }
  }
  return total_wrong;
}

}  // namespace bench
