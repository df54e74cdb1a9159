// Copyright horovod_cpp authors.
#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace bench {
namespace {

void usage(const char* prog) {
  std::printf(
      "usage: mpirun -np N %s [flags]\n"
      "Size sweep (nccl-tests style), every size timed for ours (hvd) and raw MPI, interleaved:\n"
      "  -b, --minbytes SIZE    smallest size (default 8; suffixes K, M, G = KiB, MiB, GiB)\n"
      "  -e, --maxbytes SIZE    largest size (default 64M)\n"
      "  -f, --stepfactor F     multiply the size by F each step (default 2)\n"
      "  -n, --iters N          timed iterations per size (default: 200 up to 256K, 50 up to\n"
      "                         4M, 20 above)\n"
      "  -w, --warmup N         warm-up iterations per size (default: 20 / 5 / 3 likewise)\n"
      "  -c, --check 0|1        check every collective's result (default 1)\n"
      "  -o, --ops LIST         allreduce,allgather,broadcast,alltoall,reducescatter (default\n"
      "                         all; 'none' skips the sweep)\n"
      "Training-like workloads (medians of the slowest rank per step, with raw-MPI baselines):\n"
      "  -W, --workloads LIST   a (ResNet-50 set), c (single tensors), d (many tiny tensors);\n"
      "                         default a,c,d; 'none' skips them\n"
      "  --c-sizes LIST         sizes of workload c (default 4,4K,256K,4M,64M)\n"
      "  --steps N              timed steps per workload (default 20)\n"
      "  --warmup-steps N       warm-up steps per workload (default 3)\n"
      "  --d-tensors N          tensors in workload d (default 1000)\n"
      "  --d-floats N           floats per tensor in workload d (default 256)\n"
      "  --shapes FILE          ResNet-50 shapes (default: resnet50_shapes.txt beside the\n"
      "                         executable, then the source tree)\n"
      "GPU mode (builds with CUDA and NCCL; exit 77 without them or without a device):\n"
      "  --gpu                  CUDA tensors on device HOROVOD_CPP_CUDA_DEVICE, else local rank\n"
      "                         %% device count; baseline raw NCCL on a communicator of its own.\n"
      "                         The sweep flags above apply; -W takes lat, many, big (default\n"
      "                         all): small allreduce latency, --d-tensors x --d-floats tensors\n"
      "                         per step, large allreduce busbw\n"
      "  --lat-sizes LIST       sizes of workload lat (default 4,16,64,256,1K,4K)\n"
      "  --lat-iters N          timed iterations per size of lat (default 500; warm-up a tenth)\n"
      "  --big-sizes LIST       sizes of workload big (default 64M,256M,1G)\n"
      "  --gpu-alloc cuda|pool  memory of library-allocated outputs (allgather, alltoall,\n"
      "                         reducescatter): cuda = the library's cudaMalloc/cudaFree\n"
      "                         (default), pool = cudaMallocAsync on the benchmark's stream\n"
      "Controller:\n"
      "  --gloo                 horovod_cpp on the Gloo controller instead of MPI's (the raw-MPI\n"
      "                         baselines unchanged): needs HOROVOD_GLOO_RENDEZVOUS_ADDR,\n"
      "                         HOROVOD_GLOO_RENDEZVOUS_PORT and HOROVOD_CPP_RENDEZVOUS_SECRET of a\n"
      "                         store (examples/benchmark/gloo_bench.sh serves one); each rank's\n"
      "                         place comes from MPI (local ranks: MPI_COMM_TYPE_SHARED)\n"
      "Output:\n"
      "  --json FILE            also write every figure as JSON (plot with plot_bench.py)\n"
      "  --debug-corrupt        testing only: damage our results; the check must fail\n"
      "  --debug-leak SIZE      testing only: keep SIZE more bytes at every step of our\n"
      "                         per-tensor variant of d (scripts/soak.py --self-test)\n"
      "Exit status: 0, or 1 if any result was wrong on any rank, 2 on a bad flag.\n",
      prog);
}

bool parse_size(const std::string& s, int64_t* out) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) return false;
  double mul = 1;
  std::string suf(end);
  if (suf == "K" || suf == "k") mul = 1024.0;
  else if (suf == "M" || suf == "m") mul = 1024.0 * 1024;
  else if (suf == "G" || suf == "g") mul = 1024.0 * 1024 * 1024;
  else if (!suf.empty()) return false;
  *out = static_cast<int64_t>(v * mul);
  return true;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  if (out.size() == 1 && out[0] == "none") out.clear();
  return out;
}

}  // namespace

Options parse_args(int argc, char** argv, int rank, int* exit_code) {
  Options o;
  bool workloads_given = false;
  *exit_code = -1;
  auto fail = [&](const std::string& msg) {
    if (rank == 0) std::fprintf(stderr, "hvd_bench: %s (see --help)\n", msg.c_str());
    *exit_code = 2;
  };
  for (int i = 1; i < argc && *exit_code < 0; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      if (rank == 0) usage(argv[0]);
      *exit_code = 0;
      break;
    }
    if (a == "--debug-corrupt") {
      o.corrupt = true;
      continue;
    }
    if (a == "--gpu") {
      o.gpu = true;
      continue;
    }
    if (a == "--gloo") {
      o.gloo = true;
      continue;
    }
    if (i + 1 >= argc) {
      fail("flag " + a + " needs a value");
      break;
    }
    const std::string v = argv[++i];
    auto sizes = [&](std::vector<int64_t>* dst) {
      dst->clear();
      for (const auto& s : split(v)) {
        int64_t b = 0;
        if (!parse_size(s, &b) || b < 4) fail("bad size '" + s + "' in " + a);
        dst->push_back(b);
      }
    };
    auto to_int = [&](int* dst) {
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || x < 0) fail("bad value '" + v + "' for " + a);
      *dst = static_cast<int>(x);
    };
    if (a == "--debug-leak") {
      if (!parse_size(v, &o.leak_bytes)) fail("bad size '" + v + "'");
    } else if (a == "-b" || a == "--minbytes") {
      if (!parse_size(v, &o.min_bytes)) fail("bad size '" + v + "'");
    } else if (a == "-e" || a == "--maxbytes") {
      if (!parse_size(v, &o.max_bytes)) fail("bad size '" + v + "'");
    } else if (a == "-f" || a == "--stepfactor") {
      o.factor = std::atof(v.c_str());
      if (!(o.factor > 1.0)) fail("step factor must be > 1");
    } else if (a == "-n" || a == "--iters") {
      to_int(&o.iters);
    } else if (a == "-w" || a == "--warmup") {
      to_int(&o.warmup);
    } else if (a == "-c" || a == "--check") {
      o.check = v != "0";
    } else if (a == "-o" || a == "--ops") {
      o.ops = split(v);
    } else if (a == "-W" || a == "--workloads") {
      o.workloads = split(v);
      workloads_given = true;
    } else if (a == "--c-sizes") {
      sizes(&o.c_sizes);
    } else if (a == "--lat-sizes") {
      sizes(&o.lat_sizes);
    } else if (a == "--big-sizes") {
      sizes(&o.big_sizes);
    } else if (a == "--lat-iters") {
      to_int(&o.lat_iters);
    } else if (a == "--gpu-alloc") {
      o.gpu_alloc = v;
      if (v != "cuda" && v != "pool") fail("--gpu-alloc takes cuda or pool");
    } else if (a == "--steps") {
      to_int(&o.steps);
    } else if (a == "--warmup-steps") {
      to_int(&o.warmup_steps);
    } else if (a == "--d-tensors") {
      to_int(&o.d_tensors);
    } else if (a == "--d-floats") {
      to_int(&o.d_floats);
    } else if (a == "--shapes") {
      o.shapes_file = v;
    } else if (a == "--json") {
      o.json_file = v;
    } else {
      fail("unknown flag " + a);
    }
  }
  if (*exit_code < 0 && (o.min_bytes < 1 || o.max_bytes < o.min_bytes)) {
    fail("need 1 <= minbytes <= maxbytes");
  }
  if (*exit_code < 0 && o.steps < 1) fail("--steps must be >= 1");
  if (*exit_code < 0 && o.lat_iters < 1) fail("--lat-iters must be >= 1");
  if (o.gpu && !workloads_given) o.workloads = {"lat", "many", "big"};
  return o;
}

std::string fmt_bytes(int64_t b) {
  char buf[64];
  if (b >= (1ll << 30) && b % (1ll << 30) == 0) {
    std::snprintf(buf, sizeof buf, "%lld GiB", static_cast<long long>(b >> 30));
  } else if (b >= (1 << 20) && b % (1 << 10) == 0) {
    std::snprintf(buf, sizeof buf, "%g MiB", static_cast<double>(b) / (1 << 20));
  } else if (b >= (1 << 10) && b % (1 << 10) == 0) {
    std::snprintf(buf, sizeof buf, "%g KiB", static_cast<double>(b) / (1 << 10));
  } else {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  }
  return buf;
}

std::vector<Stats> measure_interleaved(MPI_Comm comm, const std::vector<Variant>& variants,
                                       int warmup, int iters) {
  using clock = std::chrono::steady_clock;
  const size_t nv = variants.size();
  std::vector<double> times(nv * static_cast<size_t>(iters), 0.0);
  for (int it = -warmup; it < iters; ++it) {
    for (size_t v = 0; v < nv; ++v) {
      MPI_Barrier(comm);
      const auto t0 = clock::now();
      variants[v].step();
      const double dt = std::chrono::duration<double>(clock::now() - t0).count();
      if (it >= 0) times[v * static_cast<size_t>(iters) + static_cast<size_t>(it)] = dt;
    }
  }
  // The slowest rank of each step.
  MPI_Allreduce(MPI_IN_PLACE, times.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX,
                comm);
  std::vector<Stats> out(nv);
  for (size_t v = 0; v < nv; ++v) {
    std::vector<double> s(times.begin() + static_cast<long>(v * static_cast<size_t>(iters)),
                          times.begin() + static_cast<long>((v + 1) * static_cast<size_t>(iters)));
    if (s.empty()) continue;
    std::sort(s.begin(), s.end());
    const size_t n = s.size();
    Stats& st = out[v];
    st.steps = static_cast<int>(n);
    st.median_s = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    st.min_s = s.front();
    st.p90_s = s[std::min(n - 1, static_cast<size_t>(std::lround(0.9 * static_cast<double>(n - 1))))];
    double sum = 0;
    for (double x : s) sum += x;
    st.mean_s = sum / static_cast<double>(n);
  }
  return out;
}

int64_t sum_over_ranks(MPI_Comm comm, int64_t local) {
  long long v = local;
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG_LONG, MPI_SUM, comm);
  return v;
}

Json Json::object() { return Json(); }
Json Json::array() {
  Json j;
  j.kind_ = Kind::kArray;
  return j;
}
Json Json::number(double v) {
  Json j;
  j.kind_ = Kind::kNumber;
  j.num_ = v;
  return j;
}
Json Json::string(const std::string& v) {
  Json j;
  j.kind_ = Kind::kString;
  j.str_ = v;
  return j;
}
Json& Json::set(const std::string& key, Json v) {
  members_.emplace_back(key, std::move(v));
  return *this;
}
Json& Json::push(Json v) {
  items_.push_back(std::move(v));
  return *this;
}

namespace {
std::string quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += c;
    }
  }
  return o + "\"";
}
}  // namespace

std::string Json::dump(int indent) const {
  const std::string pad(static_cast<size_t>(indent) + 1, ' ');
  const std::string end_pad(static_cast<size_t>(indent), ' ');
  std::string o;
  switch (kind_) {
    case Kind::kNumber: {
      if (!std::isfinite(num_)) return "null";
      char b[40];
      std::snprintf(b, sizeof b, "%.9g", num_);
      return b;
    }
    case Kind::kString: return quote(str_);
    case Kind::kArray:
      if (items_.empty()) return "[]";
      o = "[\n";
      for (size_t i = 0; i < items_.size(); ++i) {
        o += pad + items_[i].dump(indent + 1) + (i + 1 < items_.size() ? ",\n" : "\n");
      }
      return o + end_pad + "]";
    case Kind::kObject:
      if (members_.empty()) return "{}";
      o = "{\n";
      for (size_t i = 0; i < members_.size(); ++i) {
        o += pad + quote(members_[i].first) + ": " + members_[i].second.dump(indent + 1) +
             (i + 1 < members_.size() ? ",\n" : "\n");
      }
      return o + end_pad + "}";
  }
  return o;
}

Json stats_json(const Stats& s, double bytes, double bus_factor) {
  Json j = Json::object();
  j.set("median_s", s.median_s).set("min_s", s.min_s).set("p90_s", s.p90_s);
  j.set("mean_s", s.mean_s).set("steps", s.steps);
  if (bytes > 0 && s.median_s > 0) {
    const double alg = bytes / s.median_s / 1e9;
    j.set("algbw_GBps", alg).set("busbw_GBps", alg * bus_factor);
  }
  return j;
}

int64_t count_wrong_average(const float* got, int64_t n, int64_t t, int ranks) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int r = 0; r < ranks; ++r) s += workload_seed(r, t, i);
    const double want = s / ranks;
    if (std::fabs(got[i] - want) > 1e-5 * std::max(1.0, std::fabs(want))) ++wrong;
  }
  return wrong;
}

void WorkloadReport::emit(const std::string& key, const std::string& title, double bytes,
                          int tensors, const std::vector<Variant>& vs,
                          const std::vector<Stats>& st, size_t n_ours, int64_t wrong,
                          int64_t wrong_base) const {
  if (rank != 0) return;
  const double bf = 2.0 * (n - 1) / n;
  std::printf("\n# %s: %s, %d ranks, %d steps (median of the slowest rank per step)\n",
              key.c_str(), title.c_str(), n, st[0].steps);
  // busbw is 0 on one rank (nccl-tests' definition): the table shows algbw there.
  const double shown = n > 1 ? bf : 1.0;
  std::printf("  %-36s %10s %10s %10s %9s %9s %9s\n", "variant", "median ms", "min ms", "p90 ms",
              n > 1 ? "busbw" : "algbw", "ours/this", "");
  Json vj = Json::array();
  for (size_t v = 0; v < vs.size(); ++v) {
    const double alg = bytes / st[v].median_s / 1e9;
    char ratio[32] = "";
    if (v >= n_ours) std::snprintf(ratio, sizeof ratio, "%9.2f", st[0].median_s / st[v].median_s);
    std::printf("  %-36s %10.4f %10.4f %10.4f %9.3f %9s\n", vs[v].name.c_str(),
                st[v].median_s * 1e3, st[v].min_s * 1e3, st[v].p90_s * 1e3, alg * shown, ratio);
    Json j = stats_json(st[v], bytes, bf);
    j.set("name", vs[v].name).set("kind", v < n_ours ? "hvd" : base_kind);
    if (v >= n_ours) j.set("hvd_over_this", st[0].median_s / st[v].median_s);
    vj.push(std::move(j));
  }
  if (wrong_base >= 0) {
    std::printf("  wrong elements: ours %lld, raw %s %lld\n", static_cast<long long>(wrong),
                base_kind.c_str(), static_cast<long long>(wrong_base));
  } else {
    std::printf("  wrong elements in our results: %lld\n", static_cast<long long>(wrong));
  }
  std::fflush(stdout);
  Json w = Json::object();
  w.set("key", key).set("title", title).set("bytes", bytes).set("tensors", tensors);
  w.set("wrong", static_cast<double>(wrong));
  if (wrong_base >= 0) w.set("wrong_" + base_kind, static_cast<double>(wrong_base));
  w.set("variants", std::move(vj));
  out->push(std::move(w));
}

}  // namespace bench
