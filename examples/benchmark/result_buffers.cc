// hvd_result_buffers: what the result buffer of a library-allocated collective costs, apart
// from the library. hvd_bench's baseline writes raw MPI's allgather or alltoall into one fixed
// buffer, while ours returns a new tensor each call, and the benchmark (like a training loop)
// still holds the previous result while the next one is made: the result buffers alternate,
// and the one written was last touched two calls ago. This times, interleaved step by step
// (bench::measure_interleaved: a barrier, then the slowest rank's time):
//   ours       hvd::allgather_async / alltoall_async (...).result(), held until the next call
//   mpi-fixed  raw MPI into one fixed buffer (hvd_bench's baseline)
//   mpi-two    raw MPI into two buffers in turn
//   mpi-held   raw MPI into a buffer from the library's allocator (hvd::Tensor::empty), held
//              until the next call as ours is
// so that ours / mpi-held is the library's own cost and mpi-held / mpi-fixed the buffers'.
//
//   mpirun -np 2 --bind-to none build/examples/benchmark/hvd_result_buffers
//       [allgather|alltoall] [bytes] [iters]
//
// Prints rank 0's medians (µs) and the ratios to mpi-fixed. Every variant's result is checked
// on every rank after the timed steps (rank-dependent data); exit 1 if any element is wrong.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "horovod_cpp/horovod_cpp.h"

namespace {

// Element i of rank `from`'s block for rank `to` (allgather: `to` is ignored).
float value(int from, int to, int64_t i) {
  return static_cast<float>(from * 1000003 + to * 7919 + static_cast<int>(i % 100003));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string op = argc > 1 ? argv[1] : "allgather";
  const int64_t bytes = argc > 2 ? std::atoll(argv[2]) : 256 << 10;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 500;
  if (op != "allgather" && op != "alltoall") {
    std::fprintf(stderr, "hvd_result_buffers: the collective is allgather or alltoall\n");
    return 2;
  }
  hvd::init();
  const int n = hvd::size(), me = hvd::rank();
  const bool gather = op == "allgather";
  // bytes: the result's size on each rank; per: the floats of one rank's block.
  const int64_t per = std::max<int64_t>(1, bytes / 4 / n), out_n = per * n;
  const int64_t in_n = gather ? per : out_n;
  std::vector<float> in(static_cast<size_t>(in_n));
  for (int64_t j = 0; j < in_n; ++j)
    in[j] = value(me, gather ? 0 : static_cast<int>(j / per), j % per);
  const hvd::TensorView view(in.data(), hvd::DataType::kFloat32, {in_n});
  std::vector<float> fixed(static_cast<size_t>(out_n)), two[2] = {fixed, fixed};
  int turn = 0;
  hvd::Tensor ours, held;
  const auto mpi_into = [&](float* out) {
    const int c = static_cast<int>(per);
    if (gather) {
      MPI_Allgather(in.data(), c, MPI_FLOAT, out, c, MPI_FLOAT, MPI_COMM_WORLD);
    } else {
      MPI_Alltoall(in.data(), c, MPI_FLOAT, out, c, MPI_FLOAT, MPI_COMM_WORLD);
    }
  };
  const std::vector<bench::Variant> variants = {
      {"ours",
       [&] {
         ours = gather ? hvd::allgather_async("rb." + op, view).result()
                       : hvd::alltoall_async("rb." + op, view).result();
       }},
      {"mpi-fixed", [&] { mpi_into(fixed.data()); }},
      {"mpi-two", [&] { mpi_into(two[turn ^= 1].data()); }},
      {"mpi-held",
       [&] {
         hvd::Tensor next = hvd::Tensor::empty(hvd::DataType::kFloat32, {out_n});
         mpi_into(next.data_as<float>());
         held = next;  // the previous one is released only now, as ours is
       }},
  };
  const std::vector<bench::Stats> st =
      bench::measure_interleaved(MPI_COMM_WORLD, variants, std::max(3, iters / 10), iters);
  // Every variant's last result, every element: block r holds rank r's data for this rank.
  int64_t wrong = 0;
  const auto check = [&](const float* got) {
    for (int64_t j = 0; j < out_n; ++j) {
      if (got[j] != value(static_cast<int>(j / per), gather ? 0 : me, j % per)) ++wrong;
    }
  };
  if (ours.numel() != out_n) {
    wrong += out_n;
  } else {
    check(ours.data_as<float>());
  }
  check(fixed.data());
  check(two[turn].data());
  check(held.data_as<float>());
  wrong = bench::sum_over_ranks(MPI_COMM_WORLD, wrong);
  if (me == 0) {
    std::printf("# %s, %lld bytes per rank's result, %d ranks, %d steps: median us (x mpi-fixed)\n",
                op.c_str(), static_cast<long long>(out_n * 4), n, iters);
    for (size_t v = 0; v < variants.size(); ++v) {
      std::printf("%-10s %10.2f  %5.2fx\n", variants[v].name.c_str(), st[v].median_s * 1e6,
                  st[v].median_s / st[1].median_s);
    }
    std::printf("# %s: %lld wrong elements\n", wrong ? "FAILED" : "OK",
                static_cast<long long>(wrong));
  }
  hvd::shutdown();
  return wrong ? 1 : 0;
}
