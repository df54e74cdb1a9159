// hvd_d_loop: workload d (many tiny allreduces, one call each) as a plain training loop,
// each step followed by the same data through hand-packed MPI_Allreduce, in one process.
//
// hvd_bench times every variant from a barrier and reports the slowest rank; this loop has
// no barrier between steps, like a training loop, so one rank's submission may overlap the
// other's negotiation. Both are in docs/benchmarks-history.md (round thirteen).
//
//   mpirun -np 2 --bind-to none build/examples/benchmark/hvd_d_loop [steps] [tensors] [floats]
//
// Prints rank 0's median and fastest step for both (and the median time of our submission
// loop alone), and the ratio of the medians. Exit 1 if any element of either is wrong
// (checked on every rank, first with rank-dependent data, then after the timed steps).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "horovod_cpp/horovod_cpp.h"

namespace {

using bench::count_wrong_average;
using bench::sum_over_ranks;
using bench::workload_seed;
using Tensors = std::vector<std::vector<float>>;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 1000;
  const size_t nt = argc > 2 ? static_cast<size_t>(std::atol(argv[2])) : 1000;
  const size_t nf = argc > 3 ? static_cast<size_t>(std::atol(argv[3])) : 256;
  hvd::init();
  const int n = hvd::size(), me = hvd::rank();
  Tensors ours(nt, std::vector<float>(nf)), theirs(nt, std::vector<float>(nf));
  std::vector<float> packed(nt * nf);
  std::vector<std::string> names;
  std::vector<hvd::TensorView> views;
  for (size_t k = 0; k < nt; ++k) {
    names.push_back("d_loop." + std::to_string(k));
    views.emplace_back(ours[k].data(), hvd::DataType::kFloat32,
                       hvd::Shape{static_cast<int64_t>(nf)});
  }
  std::vector<hvd::Handle> handles(nt);
  using clock = std::chrono::steady_clock;
  std::vector<double> t_submit;  // the submission loop of each timed step (rank 0's)
  bool timing = false;
  const auto step_ours = [&] {
    const auto t0 = clock::now();
    for (size_t k = 0; k < nt; ++k) handles[k] = hvd::allreduce_async(names[k], views[k]);
    if (timing) t_submit.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    for (auto& h : handles) h.wait();
  };
  const float inv = 1.0f / static_cast<float>(n);
  const auto step_theirs = [&] {
    for (size_t k = 0; k < nt; ++k)
      std::copy(theirs[k].begin(), theirs[k].end(), packed.begin() + static_cast<long>(k * nf));
    MPI_Allreduce(MPI_IN_PLACE, packed.data(), static_cast<int>(packed.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    for (float& x : packed) x *= inv;
    for (size_t k = 0; k < nt; ++k) {
      std::copy(packed.begin() + static_cast<long>(k * nf),
                packed.begin() + static_cast<long>((k + 1) * nf), theirs[k].begin());
    }
  };
  // A first step with rank-dependent data (the workloads' seed), checked against the average.
  const auto seed_all = [&](int r) {
    for (size_t k = 0; k < nt; ++k) {
      for (size_t i = 0; i < nf; ++i) {
        ours[k][i] = theirs[k][i] =
            workload_seed(r, static_cast<int64_t>(k), static_cast<int64_t>(i));
      }
    }
  };
  // Wrong elements of both, against the average of `ranks` ranks' seeds.
  const auto wrong_of = [&](int ranks) {
    int64_t w = 0;
    for (size_t k = 0; k < nt; ++k) {
      const int64_t f = static_cast<int64_t>(nf), t = static_cast<int64_t>(k);
      w += count_wrong_average(ours[k].data(), f, t, ranks) +
           count_wrong_average(theirs[k].data(), f, t, ranks);
    }
    return w;
  };
  seed_all(me);
  step_ours();
  step_theirs();
  int64_t wrong = wrong_of(n);
  // Then rank 0's seed on every rank (small integers: their average is exactly themselves),
  // so the results after every timed step are checked too.
  seed_all(0);
  std::vector<double> t_ours, t_theirs;
  timing = true;
  for (int s = 0; s < steps; ++s) {
    auto t0 = clock::now();
    step_ours();
    t_ours.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    t0 = clock::now();
    step_theirs();
    t_theirs.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  wrong += wrong_of(1);
  const int64_t wrong_all = sum_over_ranks(MPI_COMM_WORLD, wrong);
  if (me == 0 && steps > 0) {
    const double mo = median(t_ours), mt = median(t_theirs);
    std::printf(
        "d loop, %d ranks, %zu tensors x %zu floats, %d steps: hvd median %.3f ms "
        "(fastest %.3f, submitting %.3f) | packed MPI median %.3f ms (fastest %.3f) | "
        "ratio %.2f | wrong elements %lld\n",
        n, nt, nf, steps, mo * 1e3, *std::min_element(t_ours.begin(), t_ours.end()) * 1e3,
        median(t_submit) * 1e3, mt * 1e3, *std::min_element(t_theirs.begin(), t_theirs.end()) * 1e3,
        mo / mt, static_cast<long long>(wrong_all));
  }
  hvd::shutdown();
  return wrong_all == 0 ? 0 : 1;
}
