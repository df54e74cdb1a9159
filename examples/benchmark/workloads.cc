// Copyright horovod_cpp authors. The training-like workloads of hvd_bench (the same work as
// shared/bench/bench_mpi_baseline.py, so figures compare):
//   a  ResNet-50 gradient set: 161 float32 tensors averaged once per step, submitted in
//      reverse order, stable names. Baselines: a1 one MPI_Allreduce per tensor + scale;
//      a2 one MPI_Allreduce on an already contiguous buffer + scale; a3 pack, reduce, scale,
//      unpack.
//   c  one tensor averaged: 4 B .. 64 MiB. Baseline: one bare MPI_Allreduce(SUM).
//   d  1000 tensors of 256 floats, all submitted then all waited. Baselines: d1 1000
//      MPI_Allreduce calls + scale; d2 pack, one MPI_Allreduce, scale, unpack.
// Ours is run both as one allreduce_async per tensor and as one grouped_allreduce_async.
// Every step of every variant is timed on every rank after a barrier, variants interleaved.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks.h"
#include "horovod_cpp/horovod_cpp.h"

#ifndef HVD_BENCH_SOURCE_SHAPES
#define HVD_BENCH_SOURCE_SHAPES ""
#endif

namespace bench {
namespace {

using Tensors = std::vector<std::vector<float>>;

/// Directory of the running executable ("" when unknown).
std::string exe_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.find_last_of('/'));
}

/// Element counts of the ResNet-50 parameters, in model.parameters() order.
std::vector<int64_t> load_shapes(const std::string& flag) {
  std::vector<std::string> tries;
  if (!flag.empty()) {
    tries = {flag};
  } else {
    tries = {exe_dir() + "/resnet50_shapes.txt", HVD_BENCH_SOURCE_SHAPES};
  }
  for (const auto& path : tries) {
    std::ifstream f(path);
    if (!f) continue;
    std::vector<int64_t> counts;
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ss(line);
      int64_t d = 0, numel = 1;
      while (ss >> d) numel *= d;
      counts.push_back(numel);
    }
    return counts;
  }
  throw std::runtime_error("cannot read the ResNet-50 shapes (tried " + tries[0] +
                           "); pass --shapes FILE");
}

hvd::TensorView view(std::vector<float>& v) {
  return hvd::TensorView(v.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(v.size())});
}

void fill(Tensors& ts, int rank) {
  for (size_t t = 0; t < ts.size(); ++t) {
    for (size_t i = 0; i < ts[t].size(); ++i) {
      ts[t][i] = workload_seed(rank, static_cast<int64_t>(t), static_cast<int64_t>(i));
    }
  }
}

/// Wrong elements of `ts` against the average of every rank's seed.
int64_t count_wrong(const Tensors& ts, int n) {
  int64_t wrong = 0;
  for (size_t t = 0; t < ts.size(); ++t) {
    wrong += count_wrong_average(ts[t].data(), static_cast<int64_t>(ts[t].size()),
                                 static_cast<int64_t>(t), n);
  }
  return wrong;
}

void scale(float* p, size_t n, float f) {
  for (size_t i = 0; i < n; ++i) p[i] *= f;
}

void mpi_sum(float* p, size_t n, MPI_Comm comm) {
  MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm);
}

/// Our two ways of averaging a set of tensors, submitted in `order`.
struct Ours {
  std::vector<std::string> names, gnames;
  std::vector<hvd::TensorView> views;
  std::vector<hvd::Handle> handles;

  Ours(const std::string& prefix, Tensors& ts, const std::vector<size_t>& order) {
    for (size_t k : order) {
      names.push_back(prefix + "." + std::to_string(k));
      gnames.push_back(prefix + ".grouped." + std::to_string(k));
      views.push_back(view(ts[k]));
    }
    handles.resize(views.size());
  }
  void per_tensor() {
    for (size_t k = 0; k < views.size(); ++k) handles[k] = hvd::allreduce_async(names[k], views[k]);
    for (auto& h : handles) h.wait();
  }
  void grouped() { hvd::grouped_allreduce_async(gnames, views).wait(); }
};

using Report = WorkloadReport;

struct TargetFigures {
  double c4_us = -1, d_ms = -1, a_ms = -1, a_best_mpi_ms = -1, c64_ratio = -1;
};

int64_t workload_a(const Options& o, MPI_Comm comm, Report& rep, TargetFigures* tf) {
  const std::vector<int64_t> counts = load_shapes(o.shapes_file);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensors ours_t, mpi_t;
  for (int64_t c : counts) {
    ours_t.emplace_back(static_cast<size_t>(c));
    mpi_t.emplace_back(static_cast<size_t>(c));
  }
  std::vector<size_t> order(counts.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = order.size() - 1 - k;
  std::vector<float> flat(static_cast<size_t>(total)), fusion(static_cast<size_t>(total));
  const float inv = 1.0f / static_cast<float>(rep.n);

  Ours ours("a.grad", ours_t, order);
  fill(ours_t, rep.rank);
  ours.per_tensor();
  int64_t wrong = count_wrong(ours_t, rep.n);
  fill(ours_t, rep.rank);
  ours.grouped();
  wrong += count_wrong(ours_t, rep.n);
  wrong = sum_over_ranks(comm, wrong);
  fill(mpi_t, rep.rank);
  std::fill(flat.begin(), flat.end(), 1.0f);

  std::vector<Variant> vs = {
      {"hvd: 161 x allreduce_async", [&] { ours.per_tensor(); }},
      {"hvd: grouped_allreduce_async", [&] { ours.grouped(); }},
      {"mpi a1: 1 MPI_Allreduce per tensor", [&] {
         for (size_t k : order) {
           mpi_sum(mpi_t[k].data(), mpi_t[k].size(), comm);
           scale(mpi_t[k].data(), mpi_t[k].size(), inv);
         }
       }},
      {"mpi a2: 1 MPI_Allreduce, contiguous", [&] {
         mpi_sum(flat.data(), flat.size(), comm);
         scale(flat.data(), flat.size(), inv);
       }},
      {"mpi a3: pack+MPI_Allreduce+unpack", [&] {
         size_t off = 0;
         for (size_t k : order) {
           std::copy(mpi_t[k].begin(), mpi_t[k].end(), fusion.begin() + static_cast<long>(off));
           off += mpi_t[k].size();
         }
         mpi_sum(fusion.data(), fusion.size(), comm);
         scale(fusion.data(), fusion.size(), inv);
         off = 0;
         for (size_t k : order) {
           std::copy(fusion.begin() + static_cast<long>(off),
                     fusion.begin() + static_cast<long>(off + mpi_t[k].size()), mpi_t[k].begin());
           off += mpi_t[k].size();
         }
       }},
  };
  vs[0].name = "hvd: " + std::to_string(counts.size()) + " x allreduce_async";
  const auto st = measure_interleaved(comm, vs, o.warmup_steps, o.steps);
  char title[128];
  std::snprintf(title, sizeof title, "ResNet-50 gradient set (%zu tensors, %.2f MiB)",
                counts.size(), static_cast<double>(total) * 4 / (1 << 20));
  rep.emit("a", title, static_cast<double>(total) * 4, static_cast<int>(counts.size()), vs, st,
           2, wrong);
  tf->a_ms = st[0].median_s * 1e3;
  tf->a_best_mpi_ms = std::min({st[2].median_s, st[3].median_s, st[4].median_s}) * 1e3;
  return wrong;
}

int64_t workload_c(const Options& o, MPI_Comm comm, Report& rep, TargetFigures* tf) {
  int64_t wrong_all = 0;
  for (int64_t bytes : o.c_sizes) {
    const size_t cnt = static_cast<size_t>(std::max<int64_t>(1, bytes / 4));
    Tensors ours_t(1, std::vector<float>(cnt));
    std::vector<float> mb(cnt, 1.0f);
    const std::string name = "c.single." + std::to_string(bytes);
    fill(ours_t, rep.rank);
    hvd::allreduce_async(name, view(ours_t[0])).wait();
    const int64_t wrong = sum_over_ranks(comm, count_wrong(ours_t, rep.n));
    wrong_all += wrong;
    std::vector<Variant> vs = {
        {"hvd: allreduce_async (average)", [&] { hvd::allreduce_async(name, view(ours_t[0])).wait(); }},
        {"mpi: MPI_Allreduce (sum, bare)", [&] { mpi_sum(mb.data(), cnt, comm); }},
    };
    int warmup = 0, iters = 0;
    auto_iters(bytes, &warmup, &iters);
    iters = std::max(iters, o.steps);
    warmup = std::max(warmup, o.warmup_steps);
    if (o.steps < 20) iters = o.steps;  // a smoke run asked for few steps
    const auto st = measure_interleaved(comm, vs, warmup, iters);
    rep.emit("c_" + std::to_string(bytes), "single tensor of " + fmt_bytes(bytes),
             static_cast<double>(cnt * 4), 1, vs, st, 1, wrong);
    if (bytes == 4) tf->c4_us = st[0].median_s * 1e6;
    if (bytes == (64 << 20)) tf->c64_ratio = st[1].median_s / st[0].median_s;
  }
  return wrong_all;
}

int64_t workload_d(const Options& o, MPI_Comm comm, Report& rep, TargetFigures* tf) {
  const size_t nt = static_cast<size_t>(o.d_tensors), nf = static_cast<size_t>(o.d_floats);
  Tensors ours_t(nt, std::vector<float>(nf)), mpi_t(nt, std::vector<float>(nf));
  std::vector<float> packed(nt * nf);
  std::vector<size_t> order(nt);
  for (size_t k = 0; k < nt; ++k) order[k] = k;
  const float inv = 1.0f / static_cast<float>(rep.n);
  Ours ours("d.tiny", ours_t, order);
  std::vector<std::unique_ptr<char[]>> leaked;  // --debug-leak only
  fill(ours_t, rep.rank);
  ours.per_tensor();
  int64_t wrong = count_wrong(ours_t, rep.n);
  fill(ours_t, rep.rank);
  ours.grouped();
  wrong = sum_over_ranks(comm, wrong + count_wrong(ours_t, rep.n));
  fill(mpi_t, rep.rank);
  std::vector<Variant> vs = {
      {"hvd: " + std::to_string(nt) + " x allreduce_async", [&] {
         ours.per_tensor();
         if (o.leak_bytes > 0) {  // --debug-leak: memory held until exit, touched so it counts
           leaked.emplace_back(new char[static_cast<size_t>(o.leak_bytes)]);
           std::memset(leaked.back().get(), 1, static_cast<size_t>(o.leak_bytes));
         }
       }},
      {"hvd: grouped_allreduce_async", [&] { ours.grouped(); }},
      {"mpi d1: " + std::to_string(nt) + " x MPI_Allreduce", [&] {
         for (auto& t : mpi_t) {
           mpi_sum(t.data(), nf, comm);
           scale(t.data(), nf, inv);
         }
       }},
      {"mpi d2: pack+MPI_Allreduce+unpack", [&] {
         for (size_t k = 0; k < nt; ++k) std::copy(mpi_t[k].begin(), mpi_t[k].end(), packed.begin() + static_cast<long>(k * nf));
         mpi_sum(packed.data(), packed.size(), comm);
         scale(packed.data(), packed.size(), inv);
         for (size_t k = 0; k < nt; ++k) {
           std::copy(packed.begin() + static_cast<long>(k * nf),
                     packed.begin() + static_cast<long>((k + 1) * nf), mpi_t[k].begin());
         }
       }},
  };
  const auto st = measure_interleaved(comm, vs, o.warmup_steps, o.steps);
  rep.emit("d", std::to_string(nt) + " tensors x " + std::to_string(nf) + " floats",
           static_cast<double>(nt * nf * 4), static_cast<int>(nt), vs, st, 2, wrong);
  if (nt == 1000 && nf == 256) tf->d_ms = st[0].median_s * 1e3;
  return wrong;
}

void add_target(Json* targets, const char* name, double ours, double limit, const char* unit,
                const std::string& rule, bool met, const std::string& reference) {
  std::printf("  %-34s %12.4g %-5s %-28s %-8s %s\n", name, ours, unit, rule.c_str(),
              met ? "MET" : "NOT MET", reference.c_str());
  Json t = Json::object();
  t.set("target", name).set("value", ours).set("limit", limit).set("unit", unit);
  t.set("rule", rule).set("met", met ? 1.0 : 0.0).set("reference", reference);
  targets->push(std::move(t));
}

}  // namespace

int64_t run_workloads(const Options& o, MPI_Comm comm, Json* out, Json* targets) {
  Report rep;
  rep.out = out;
  MPI_Comm_rank(comm, &rep.rank);
  MPI_Comm_size(comm, &rep.n);
  TargetFigures tf;
  int64_t wrong = 0;
  for (const std::string& w : o.workloads) {
    if (w == "a") wrong += workload_a(o, comm, rep, &tf);
    else if (w == "c") wrong += workload_c(o, comm, rep, &tf);
    else if (w == "d") wrong += workload_d(o, comm, rep, &tf);
    else if (rep.rank == 0) std::fprintf(stderr, "hvd_bench: unknown workload '%s'\n", w.c_str());
  }
  if (rep.rank == 0 && (tf.c4_us >= 0 || tf.d_ms >= 0 || tf.a_ms >= 0 || tf.c64_ratio >= 0)) {
    std::printf("\n# targets (%d ranks; the issue's targets are for 2 ranks)\n", rep.n);
    char ref[96];
    if (tf.c4_us >= 0) {
      add_target(targets, "c: 4 B allreduce", tf.c4_us, 30, "us", "<= 30 us", tf.c4_us <= 30,
                 "Horovod 1.07 ms, raw MPI 2.9 us");
    }
    if (tf.d_ms >= 0) {
      add_target(targets, "d: 1000 x 256 floats per step", tf.d_ms, 6, "ms", "<= 6 ms",
                 tf.d_ms <= 6, "Horovod 29 ms; MPI 6.8 ms / 3.0 ms packed");
    }
    if (tf.a_ms >= 0) {
      std::snprintf(ref, sizeof ref, "best raw MPI here %.1f ms", tf.a_best_mpi_ms);
      add_target(targets, "a: ResNet-50 set / best raw MPI", tf.a_ms / tf.a_best_mpi_ms, 1.0, "x",
                 "<= 1.0x", tf.a_ms <= tf.a_best_mpi_ms, ref);
    }
    if (tf.c64_ratio >= 0) {
      add_target(targets, "c: 64 MiB busbw / raw MPI busbw", tf.c64_ratio, 1.5, "x", ">= 1.5x",
                 tf.c64_ratio >= 1.5, "Horovod 51.7 ms, raw MPI 43.0 ms");
    }
    std::fflush(stdout);
  }
  return wrong;
}

}  // namespace bench
