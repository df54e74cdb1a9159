// Copyright horovod_cpp authors. The size sweep of hvd_bench (data, sizes and the driver:
// sweep.h) and its CPU mode: ours against raw MPI on host buffers.
//
// alltoall and reducescatter are timed for raw MPI always, and for horovod_cpp when its API has
// them: CMake defines HVD_BENCH_HAVE_ALLTOALL / HVD_BENCH_HAVE_REDUCESCATTER when the calls in
// ours_alltoall() / ours_reducescatter() below compile against horovod_cpp/api.h.
#include "sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
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

/// Ours and raw MPI on host buffers.
SweepCase make_mpi_case(const SweepLayout& l, MPI_Comm comm, bool corrupt) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::string& op = l.op;
  const std::string name = "sweep." + op + "." + std::to_string(l.bytes);
  SweepCase c;
  c.layout = l;
  // Damages one element of our result on rank 0 (testing the check itself).
  auto damage = [corrupt, rank](float* p) {
    if (corrupt && rank == 0) p[0] += 1.0f;
  };
  const int64_t per = l.per, in_n = l.in_n, out_n = l.out_n;
  const auto fill = l.fill;
  const auto want = l.want;

  if (op == "allreduce" || op == "broadcast") {
    Buf ob = make_buf(in_n), mb = make_buf(in_n);
    if (op == "allreduce") {
      hvd::AllreduceOptions sum;
      sum.op = hvd::ReduceOp::kSum;
      c.ours = [=] { hvd::allreduce_async(name, view(ob), sum).wait(); };
      c.base = [=] {
        MPI_Allreduce(MPI_IN_PLACE, mb->data(), static_cast<int>(in_n), MPI_FLOAT, MPI_SUM, comm);
      };
    } else {
      c.ours = [=] { hvd::broadcast_async(name, view(ob), 0).wait(); };
      c.base = [=] { MPI_Bcast(mb->data(), static_cast<int>(in_n), MPI_FLOAT, 0, comm); };
    }
    c.check_ours = [=, ours = c.ours] {
      fill(ob->data());
      ours();
      damage(ob->data());
      return count_wrong(ob->data(), out_n, want);
    };
    c.check_base = [=, base = c.base] {
      fill(mb->data());
      base();
      return count_wrong(mb->data(), out_n, want);
    };
    return c;
  }
  Buf oin = make_buf(in_n), min = make_buf(in_n), mout = make_buf(out_n);
  auto holder = std::make_shared<hvd::Tensor>();  // our last result
  if (op == "allgather") {
    c.base = [=] {
      MPI_Allgather(min->data(), static_cast<int>(per), MPI_FLOAT, mout->data(),
                    static_cast<int>(per), MPI_FLOAT, comm);
    };
    c.ours = [=] { *holder = hvd::allgather_async(name, view(oin)).result(); };
  } else if (op == "alltoall") {
    c.base = [=] {
      MPI_Alltoall(min->data(), static_cast<int>(per), MPI_FLOAT, mout->data(),
                   static_cast<int>(per), MPI_FLOAT, comm);
    };
#ifdef HVD_BENCH_HAVE_ALLTOALL
    c.ours = [=] { *holder = ours_alltoall(name, view(oin)); };
#endif
  } else {
    c.base = [=] {
      MPI_Reduce_scatter_block(min->data(), mout->data(), static_cast<int>(per), MPI_FLOAT,
                               MPI_SUM, comm);
    };
#ifdef HVD_BENCH_HAVE_REDUCESCATTER
    c.ours = [=] { *holder = ours_reducescatter(name, view(oin)); };
#endif
  }
  if (c.ours) {
    c.check_ours = [=, ours = c.ours] {
      fill(oin->data());
      ours();
      if (holder->numel() != out_n) return out_n;  // wrong shape: every element is wrong
      float* got = holder->data_as<float>();
      damage(got);
      return count_wrong(got, out_n, want);
    };
  }
  c.check_base = [=, base = c.base] {
    fill(min->data());
    base();
    return count_wrong(mout->data(), out_n, want);
  };
  return c;
}

}  // namespace

bool is_sweep_op(const std::string& op) {
  return op == "allreduce" || op == "allgather" || op == "broadcast" || op == "alltoall" ||
         op == "reducescatter";
}

double bus_factor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;  // allgather, reducescatter, alltoall
}

const char* bus_factor_formula(const std::string& op) {
  return op == "allreduce" ? "2(n-1)/n" : op == "broadcast" ? "1" : "(n-1)/n";
}

int64_t count_wrong(const float* got, int64_t n, const std::function<float(int64_t)>& want) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (got[i] != want(i)) ++wrong;
  }
  return wrong;
}

SweepLayout sweep_layout(const std::string& op, int64_t bytes, int rank, int n) {
  SweepLayout l;
  l.op = op;
  if (op == "allreduce" || op == "broadcast") {
    const int64_t cnt = std::max<int64_t>(1, bytes / 4);
    l.count = l.in_n = l.out_n = cnt;
    l.bytes = cnt * 4;
    const bool ar = op == "allreduce";
    l.fill = [=](float* p) {
      for (int64_t i = 0; i < cnt; ++i) p[i] = ar || rank == 0 ? seed(rank, i) : -1.0f;
    };
    l.want = [=](int64_t i) {
      if (!ar) return seed(0, i);
      float s = 0;
      for (int r = 0; r < n; ++r) s += seed(r, i);
      return s;
    };
    return l;
  }
  // allgather, alltoall, reducescatter: per = elements per rank block.
  const int64_t per = std::max<int64_t>(1, bytes / 4 / n);
  l.per = per;
  l.count = per * n;
  l.bytes = per * n * 4;
  l.in_n = op == "allgather" ? per : per * n;
  l.out_n = op == "reducescatter" ? per : per * n;
  if (op == "allgather") {
    l.fill = [=](float* p) { for (int64_t i = 0; i < per; ++i) p[i] = seed(rank, i); };
    l.want = [=](int64_t j) { return seed(static_cast<int>(j / per), j % per); };
  } else if (op == "alltoall") {
    l.fill = [=](float* p) {
      for (int64_t j = 0; j < per * n; ++j) p[j] = seed_a2a(rank, static_cast<int>(j / per), j % per);
    };
    l.want = [=](int64_t j) { return seed_a2a(static_cast<int>(j / per), rank, j % per); };
  } else {
    l.fill = [=](float* p) { for (int64_t j = 0; j < per * n; ++j) p[j] = seed(rank, j); };
    l.want = [=](int64_t i) {
      float s = 0;
      for (int r = 0; r < n; ++r) s += seed(r, rank * per + i);
      return s;
    };
  }
  return l;
}

int64_t run_sweep(const Options& opts, MPI_Comm comm, Json* out) {
  SweepBaseline mpi;
  mpi.label = "MPI";
  mpi.key = "mpi";
  mpi.make_case = [&opts, comm](const SweepLayout& l) { return make_mpi_case(l, comm, opts.corrupt); };
  return run_sweep_with(opts, comm, mpi, out);
}

int64_t run_sweep_with(const Options& opts, MPI_Comm comm, const SweepBaseline& baseline,
                       Json* out) {
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  const char* bl = baseline.label.c_str();
  if (rank == 0 && !baseline.note.empty()) std::printf("# %s\n", baseline.note.c_str());
  int64_t total_wrong = 0;
  for (const std::string& op : opts.ops) {
    if (!is_sweep_op(op)) {
      if (rank == 0) std::fprintf(stderr, "hvd_bench: unknown op '%s' skipped\n", op.c_str());
      continue;
    }
    const double bf = bus_factor(op, n);
    bool have_ours = true;
    Json rows = Json::array();
    bool first = true;
    for (double b = static_cast<double>(opts.min_bytes); b <= static_cast<double>(opts.max_bytes);
         b *= opts.factor) {
      SweepCase c = baseline.make_case(sweep_layout(op, static_cast<int64_t>(b), rank, n));
      const SweepLayout& l = c.layout;
      if (first) have_ours = static_cast<bool>(c.ours);
      if (first && rank == 0) {
        std::printf("\n# %s (float32%s), %d ranks, busbw = algbw * %s%s\n", op.c_str(),
                    op == "allreduce" || op == "reducescatter" ? ", sum" : "", n,
                    bus_factor_formula(op),
                    have_ours ? "" : "  [not in horovod_cpp/api.h yet: raw baseline only]");
        std::printf("# %10s %10s | %10s %8s %8s %6s | %7s us %8s %8s %6s | %7s\n", "size",
                    "count", "hvd us", "algbw", "busbw", "#wrong", bl, "algbw", "busbw", "#wrong",
                    ("hvd/" + baseline.label).c_str());
      }
      first = false;
      int64_t wrong_ours = -1, wrong_base = -1;
      if (opts.check) {
        if (c.check_ours) wrong_ours = sum_over_ranks(comm, c.check_ours());
        wrong_base = sum_over_ranks(comm, c.check_base());
        total_wrong += std::max<int64_t>(0, wrong_ours) + std::max<int64_t>(0, wrong_base);
      }
      int warmup = 0, iters = 0;
      auto_iters(l.bytes, &warmup, &iters);
      if (opts.iters > 0) iters = opts.iters;
      if (opts.warmup > 0) warmup = opts.warmup;
      std::vector<Variant> vs;
      if (c.ours) vs.push_back({"hvd", c.ours});
      vs.push_back({baseline.key, c.base});
      const std::vector<Stats> st = measure_interleaved(comm, vs, warmup, iters);
      const Stats* so = c.ours ? &st[0] : nullptr;
      const Stats& sm = st.back();
      if (rank == 0) {
        auto alg = [&](const Stats& s) { return static_cast<double>(l.bytes) / s.median_s / 1e9; };
        char ours_col[64] = "       n/a      n/a      n/a    n/a";
        if (so) {
          std::snprintf(ours_col, sizeof ours_col, "%10.2f %8.3f %8.3f %6lld", so->median_s * 1e6,
                        alg(*so), alg(*so) * bf, static_cast<long long>(wrong_ours));
        }
        char ratio[16] = "    n/a";
        if (so) std::snprintf(ratio, sizeof ratio, "%7.2f", so->median_s / sm.median_s);
        std::printf("  %10lld %10lld | %s | %10.2f %8.3f %8.3f %6lld | %s\n",
                    static_cast<long long>(l.bytes), static_cast<long long>(l.count), ours_col,
                    sm.median_s * 1e6, alg(sm), alg(sm) * bf, static_cast<long long>(wrong_base),
                    ratio);
        std::fflush(stdout);
        Json row = Json::object();
        row.set("bytes", static_cast<double>(l.bytes)).set("count", static_cast<double>(l.count));
        if (so) {
          Json j = stats_json(*so, static_cast<double>(l.bytes), bf);
          j.set("wrong", static_cast<double>(wrong_ours));
          row.set("hvd", std::move(j));
        }
        Json j = stats_json(sm, static_cast<double>(l.bytes), bf);
        j.set("wrong", static_cast<double>(wrong_base));
        row.set(baseline.key, std::move(j));
        rows.push(std::move(row));
      }
    }
    if (rank == 0) {
      Json o = Json::object();
      o.set("op", op).set("bus_factor", bf).set("hvd_available", have_ours ? 1.0 : 0.0);
      o.set("baseline", baseline.key).set("rows", std::move(rows));
      out->push(std::move(o));
    }
  }
  return total_wrong;
}

}  // namespace bench
