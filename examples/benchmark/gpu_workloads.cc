// Copyright horovod_cpp authors. The workloads of hvd_bench --gpu, float32 averages on CUDA
// tensors, each beside raw NCCL (ncclAvg) in the same run, variants interleaved step by step:
//   lat   one small tensor (4 B .. 4 KiB), --lat-iters iterations: allreduce latency.
//   many  --d-tensors tensors of --d-floats floats (1000 x 256) per step. Ours: one
//         allreduce_async per tensor then wait for all; one grouped_allreduce_async. Raw NCCL:
//         m1 one ncclAllReduce per tensor inside one ncclGroupStart/End; m2 one ncclAllReduce
//         over the tensors, which lie back to back in one allocation (no packing: a bound);
//         m3 pack (a cudaMemcpyAsync per tensor), one ncclAllReduce, unpack.
//   big   one large tensor (64 MiB, 256 MiB, 1 GiB; --big-sizes): allreduce busbw.
// Before timing, every variant runs once on data seeded by rank and its results are copied to
// the host and checked element by element (ours and raw NCCL alike).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gpu_util.h"

namespace bench {
namespace {

/// One variant: its timed step, and a check that fills its input, runs the step once and
/// returns its wrong elements on this rank.
struct GpuVariant {
  Variant v;
  std::function<int64_t()> check;
};

/// Uploads tensors t = 0 .. count-1 of `floats` elements each, back to back at `dst`.
void fill_tensors(const Gpu& g, float* dst, int64_t count, int64_t floats) {
  float* host = g.host_input(count * floats);
  for (int64_t t = 0; t < count; ++t) {
    for (int64_t i = 0; i < floats; ++i) host[t * floats + i] = workload_seed(g.rank, t, i);
  }
  g.upload(dst, count * floats);
}

/// Wrong elements of the `count` averaged tensors at `src` (back to back).
int64_t check_tensors(const Gpu& g, const float* src, int64_t count, int64_t floats, bool ours) {
  float* got = g.download(src, count * floats);
  if (ours) g.damage(got);
  int64_t wrong = 0;
  for (int64_t t = 0; t < count; ++t) {
    wrong += count_wrong_average(got + t * floats, floats, t, g.n);
  }
  return wrong;
}

/// Checks, times and reports the variants of one workload ([0, n_ours) are ours).
int64_t run_variants(const Gpu& g, WorkloadReport& rep, const std::string& key,
                     const std::string& title, double bytes, int tensors,
                     const std::vector<GpuVariant>& gv, size_t n_ours, int warmup, int iters) {
  int64_t wrong_ours = 0, wrong_base = 0;
  std::vector<Variant> vs;
  for (size_t k = 0; k < gv.size(); ++k) {
    (k < n_ours ? wrong_ours : wrong_base) += gv[k].check();
    vs.push_back(gv[k].v);
  }
  wrong_ours = sum_over_ranks(g.comm, wrong_ours);
  wrong_base = sum_over_ranks(g.comm, wrong_base);
  const std::vector<Stats> st = measure_interleaved(g.comm, vs, warmup, iters);
  rep.emit(key, title, bytes, tensors, vs, st, n_ours, wrong_ours, wrong_base);
  return wrong_ours + wrong_base;
}

/// lat and big: one tensor of `bytes`, ours against one ncclAllReduce(ncclAvg).
int64_t single_tensor(const Gpu& g, WorkloadReport& rep, const std::string& key,
                      const std::string& title, int64_t bytes, int warmup, int iters) {
  const int64_t cnt = std::max<int64_t>(1, bytes / 4);
  DevBuf ob = device_alloc(cnt), rb = device_alloc(cnt);
  const std::string name = "gpu." + key;
  std::vector<GpuVariant> gv(2);
  gv[0].v = {"hvd: allreduce_async (average)",
             [&] { hvd::allreduce_async(name, g.view(ob.get(), cnt)).wait(); }};
  gv[1].v = {"nccl: ncclAllReduce (ncclAvg)", [&] {
               BENCH_NCCL(ncclAllReduce(rb.get(), rb.get(), static_cast<size_t>(cnt), ncclFloat32,
                                        ncclAvg, g.nccl, g.stream));
               g.sync();
             }};
  gv[0].check = [&] {
    fill_tensors(g, ob.get(), 1, cnt);
    gv[0].v.step();
    return check_tensors(g, ob.get(), 1, cnt, true);
  };
  gv[1].check = [&] {
    fill_tensors(g, rb.get(), 1, cnt);
    gv[1].v.step();
    return check_tensors(g, rb.get(), 1, cnt, false);
  };
  return run_variants(g, rep, key, title, static_cast<double>(cnt * 4), 1, gv, 1, warmup, iters);
}

int64_t workload_many(const Options& o, const Gpu& g, WorkloadReport& rep) {
  const int64_t nt = o.d_tensors, nf = o.d_floats;
  const size_t fb = static_cast<size_t>(nf) * sizeof(float);
  DevBuf ours_all = device_alloc(nt * nf), raw_all = device_alloc(nt * nf);
  DevBuf packed = device_alloc(nt * nf);
  std::vector<std::string> names, gnames;
  std::vector<hvd::TensorView> views;
  for (int64_t k = 0; k < nt; ++k) {
    names.push_back("gpu.many." + std::to_string(k));
    gnames.push_back("gpu.many.grouped." + std::to_string(k));
    views.push_back(g.view(ours_all.get() + k * nf, nf));
  }
  std::vector<hvd::Handle> handles(views.size());
  auto raw_tensor = [&](int64_t k) { return raw_all.get() + k * nf; };
  const std::string snt = std::to_string(nt);
  std::vector<GpuVariant> gv(5);
  gv[0].v = {"hvd: " + snt + " x allreduce_async", [&] {
               for (size_t k = 0; k < views.size(); ++k) {
                 handles[k] = hvd::allreduce_async(names[k], views[k]);
               }
               for (auto& h : handles) h.wait();
             }};
  gv[1].v = {"hvd: grouped_allreduce_async", [&] {
               hvd::grouped_allreduce_async(gnames, views).wait();
             }};
  gv[2].v = {"nccl m1: " + snt + " x ncclAllReduce, 1 group", [&] {
               BENCH_NCCL(ncclGroupStart());
               for (int64_t k = 0; k < nt; ++k) {
                 BENCH_NCCL(ncclAllReduce(raw_tensor(k), raw_tensor(k), static_cast<size_t>(nf),
                                          ncclFloat32, ncclAvg, g.nccl, g.stream));
               }
               BENCH_NCCL(ncclGroupEnd());
               g.sync();
             }};
  gv[3].v = {"nccl m2: 1 ncclAllReduce, contiguous", [&] {
               BENCH_NCCL(ncclAllReduce(raw_all.get(), raw_all.get(), static_cast<size_t>(nt * nf),
                                        ncclFloat32, ncclAvg, g.nccl, g.stream));
               g.sync();
             }};
  gv[4].v = {"nccl m3: pack+ncclAllReduce+unpack", [&] {
               for (int64_t k = 0; k < nt; ++k) {
                 BENCH_CUDA(cudaMemcpyAsync(packed.get() + k * nf, raw_tensor(k), fb,
                                            cudaMemcpyDeviceToDevice, g.stream));
               }
               BENCH_NCCL(ncclAllReduce(packed.get(), packed.get(), static_cast<size_t>(nt * nf),
                                        ncclFloat32, ncclAvg, g.nccl, g.stream));
               for (int64_t k = 0; k < nt; ++k) {
                 BENCH_CUDA(cudaMemcpyAsync(raw_tensor(k), packed.get() + k * nf, fb,
                                            cudaMemcpyDeviceToDevice, g.stream));
               }
               g.sync();
             }};
  for (size_t k = 0; k < gv.size(); ++k) {
    const bool ours = k < 2;
    float* buf = ours ? ours_all.get() : raw_all.get();
    gv[k].check = [&, k, ours, buf] {
      fill_tensors(g, buf, nt, nf);
      gv[k].v.step();
      return check_tensors(g, buf, nt, nf, ours);
    };
  }
  return run_variants(g, rep, "many", snt + " tensors x " + std::to_string(nf) + " floats",
                      static_cast<double>(nt * nf * 4), static_cast<int>(nt), gv, 2,
                      o.warmup_steps, o.steps);
}

}  // namespace

int64_t run_gpu_workloads(const Options& o, const Gpu& g, Json* out) {
  WorkloadReport rep;
  rep.rank = g.rank;
  rep.n = g.n;
  rep.out = out;
  rep.base_kind = "nccl";
  int64_t wrong = 0;
  for (const std::string& w : o.workloads) {
    if (w == "lat") {
      const int warmup = std::max(o.warmup_steps, o.lat_iters / 10);
      for (int64_t b : o.lat_sizes) {
        wrong += single_tensor(g, rep, "lat_" + std::to_string(b),
                               "allreduce latency, one tensor of " + fmt_bytes(b), b, warmup,
                               o.lat_iters);
      }
    } else if (w == "many") {
      wrong += workload_many(o, g, rep);
    } else if (w == "big") {
      for (int64_t b : o.big_sizes) {
        wrong += single_tensor(g, rep, "big_" + std::to_string(b),
                               "allreduce busbw, one tensor of " + fmt_bytes(b), b,
                               o.warmup_steps, o.steps);
      }
    } else if (g.rank == 0) {
      std::fprintf(stderr, "hvd_bench: unknown GPU workload '%s' (lat, many, big)\n", w.c_str());
    }
  }
  return wrong;
}

}  // namespace bench
