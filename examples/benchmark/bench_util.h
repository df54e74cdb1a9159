// Copyright horovod_cpp authors. Benchmark helpers: options, interleaved timing, statistics,
// formatting and the JSON report of hvd_bench.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bench {

/// Command-line options of hvd_bench (defaults documented in usage()).
struct Options {
  // Size sweep (nccl-tests style).
  int64_t min_bytes = 8;
  int64_t max_bytes = 64ll << 20;
  double factor = 2.0;
  int iters = 0;   ///< timed iterations per size; 0 = automatic (200 small .. 20 large)
  int warmup = 0;  ///< warm-up iterations per size; 0 = automatic
  bool check = true;
  std::vector<std::string> ops = {"allreduce", "allgather", "broadcast", "alltoall",
                                  "reducescatter"};
  // Training-like workloads (shared/bench/README.md).
  std::vector<std::string> workloads = {"a", "c", "d"};
  std::vector<int64_t> c_sizes = {4, 4 << 10, 256 << 10, 4 << 20, 64 << 20};
  int steps = 20;        ///< timed steps per workload (>= 20 for reported medians)
  int warmup_steps = 3;  ///< untimed steps per workload
  int d_tensors = 1000;
  int d_floats = 256;
  std::string shapes_file;  ///< ResNet-50 shapes; default: next to the executable
  std::string json_file;
  bool corrupt = false;  ///< testing only: damage our results so the check must fail
  int64_t leak_bytes = 0;  ///< testing only: bytes kept per step of d (the soak must see it)
  // GPU mode (--gpu, gpu_bench.cc): CUDA tensors, baseline raw NCCL. -W then takes
  // lat, many, big (default all three); many uses d_tensors x d_floats.
  bool gpu = false;
  /// --gloo: our library runs the Gloo controller (its store given by the environment, the
  /// places taken from MPI's ranks) while the raw-MPI baselines stay in the same run.
  bool gloo = false;
  std::string gpu_alloc = "cuda";  ///< library-allocated outputs: cuda (its default) or pool
  std::vector<int64_t> lat_sizes = {4, 16, 64, 256, 1 << 10, 4 << 10};
  int lat_iters = 500;  ///< timed iterations per size of workload lat (warm-up: a tenth)
  std::vector<int64_t> big_sizes = {64ll << 20, 256ll << 20, 1ll << 30};
};

/// Parses argv; on --help or a bad flag prints usage (rank 0) and sets *exit_code >= 0.
Options parse_args(int argc, char** argv, int rank, int* exit_code);

/// "4 B", "256 KiB", "64 MiB".
std::string fmt_bytes(int64_t bytes);

/// Statistics of per-step times, each step's time being the slowest rank's.
struct Stats {
  double median_s = 0, min_s = 0, p90_s = 0, mean_s = 0;
  int steps = 0;
};

/// One variant of a measurement: a step function, run once per iteration.
struct Variant {
  std::string name;
  std::function<void()> step;
};

/// Runs `warmup` + `iters` iterations; each iteration runs every variant once, in order
/// (interleaving ours with the baselines), after an MPI_Barrier on `comm`, and times it on
/// every rank. Returns, on every rank, the statistics of the per-iteration maximum over ranks.
std::vector<Stats> measure_interleaved(MPI_Comm comm, const std::vector<Variant>& variants,
                                       int warmup, int iters);

/// Sum of `local` over the ranks of `comm`.
int64_t sum_over_ranks(MPI_Comm comm, int64_t local);

/// A tiny JSON writer: objects and arrays built by hand, written once by rank 0.
class Json {
 public:
  static Json object();
  static Json array();
  static Json number(double v);
  static Json string(const std::string& v);
  Json& set(const std::string& key, Json v);  ///< object member (keeps insertion order)
  Json& set(const std::string& key, double v) { return set(key, number(v)); }
  Json& set(const std::string& key, const char* v) { return set(key, string(v)); }
  Json& set(const std::string& key, const std::string& v) { return set(key, string(v)); }
  Json& push(Json v);  ///< array element
  std::string dump(int indent = 0) const;

 private:
  enum class Kind { kObject, kArray, kNumber, kString } kind_ = Kind::kObject;
  double num_ = 0;
  std::string str_;
  std::vector<std::pair<std::string, Json>> members_;
  std::vector<Json> items_;
};

/// Statistics as a JSON object, with algbw/busbw when bytes > 0.
Json stats_json(const Stats& s, double bytes, double bus_factor);

/// The workloads' data: what rank r puts at element i of tensor t (small integers).
inline float workload_seed(int r, int64_t t, int64_t i) {
  return static_cast<float>((r * 7 + t * 5 + i * 3) % 31);
}
/// Elements of got[0, n) (tensor t's result) that differ from the average over `ranks` ranks of
/// workload_seed by more than a relative 1e-5.
int64_t count_wrong_average(const float* got, int64_t n, int64_t t, int ranks);

/// Prints (rank 0) and records one allreduce workload: each variant's statistics, busbw, and
/// the ratio of ours (variant 0) to each baseline. Variants [0, n_ours) are ours.
struct WorkloadReport {
  int rank = 0, n = 1;
  Json* out = nullptr;
  std::string base_kind = "mpi";  ///< JSON "kind" of the baselines: "mpi" or "nccl"
  /// `wrong`: wrong elements of our results (summed over ranks); `wrong_base`, when >= 0, of
  /// the baselines' results.
  void emit(const std::string& key, const std::string& title, double bytes, int tensors,
            const std::vector<Variant>& vs, const std::vector<Stats>& st, size_t n_ours,
            int64_t wrong, int64_t wrong_base = -1) const;
};

}  // namespace bench
