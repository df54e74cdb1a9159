// hvd_d_loop: workload d (many tiny allreduces, one call each) as a plain training loop,
// each step followed by the same data through hand-packed MPI_Allreduce, in one process.
//
// hvd_bench times every variant from a barrier and reports the slowest rank; this loop has
// no barrier between steps, like a training loop, so one rank's submission may overlap the
// other's negotiation. Both are in docs/benchmarks.md (round thirteen).
//
//   mpirun -np 2 --bind-to none build/examples/benchmark/hvd_d_loop [steps] [tensors] [floats]
//
// Prints rank 0's median and fastest step for both, and the ratio of the medians. Exit 1 if
// any element of either is wrong (checked on every rank, first with rank-dependent data,
// then after every timed step).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"

namespace {

using Tensors = std::vector<std::vector<float>>;

// The value every rank holds in element i of tensor k (the same on every rank, so the
// average is the value itself, exactly).
float seed(size_t k, size_t i) {
  return static_cast<float>((k * 7 + i) % 13);
}

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
  const auto step_ours = [&] {
    for (size_t k = 0; k < nt; ++k) handles[k] = hvd::allreduce_async(names[k], views[k]);
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
  // A first step with rank-dependent data: the average of rank + i over the ranks.
  long wrong = 0;
  for (size_t k = 0; k < nt; ++k) {
    for (size_t i = 0; i < nf; ++i)
      ours[k][i] = theirs[k][i] = static_cast<float>(me + 2 * static_cast<int>(i % 5));
  }
  step_ours();
  step_theirs();
  const float base = static_cast<float>(n - 1) / 2.0f;
  for (size_t k = 0; k < nt; ++k) {
    for (size_t i = 0; i < nf; ++i) {
      const float want = base + static_cast<float>(2 * (i % 5));
      wrong += (ours[k][i] != want) + (theirs[k][i] != want);
      ours[k][i] = theirs[k][i] = seed(k, i);
    }
  }
  std::vector<double> t_ours, t_theirs;
  using clock = std::chrono::steady_clock;
  for (int s = 0; s < steps; ++s) {
    auto t0 = clock::now();
    step_ours();
    t_ours.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    t0 = clock::now();
    step_theirs();
    t_theirs.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  for (size_t k = 0; k < nt; ++k) {
    for (size_t i = 0; i < nf; ++i)
      wrong += (ours[k][i] != seed(k, i)) + (theirs[k][i] != seed(k, i));
  }
  long wrong_all = 0;
  MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0 && steps > 0) {
    const double mo = median(t_ours), mt = median(t_theirs);
    std::printf(
        "d loop, %d ranks, %zu tensors x %zu floats, %d steps: hvd median %.3f ms "
        "(fastest %.3f) | packed MPI median %.3f ms (fastest %.3f) | ratio %.2f | "
        "wrong elements %ld\n",
        n, nt, nf, steps, mo * 1e3, *std::min_element(t_ours.begin(), t_ours.end()) * 1e3, mt * 1e3,
        *std::min_element(t_theirs.begin(), t_theirs.end()) * 1e3, mo / mt, wrong_all);
  }
  hvd::shutdown();
  return wrong_all == 0 ? 0 : 1;
}
