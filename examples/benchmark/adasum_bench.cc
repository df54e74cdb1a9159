// Copyright horovod_cpp authors. Adasum's two schedules over the MPI data plane, timed
// alternately: the gathered path (allgatherv of every rank's buffer, the tree on each rank)
// and vector-halving distance-doubling (transport/cpu/adasum_vhdd.h). float32 buffers of one
// tensor from 1 KiB to --max bytes (x --factor steps, 4); per size, `--rounds` alternations of
// `--iters` calls of each, the median of the rounds' per-call times printed with each path's
// bytes received per rank. Checks that both paths agree (within float rounding).
//   mpirun -np 4 adasum_bench [--max 64M] [--factor 4] [--rounds 5] [--iters N]
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/host/adasum.h"
#include "transport/cpu/adasum_vhdd.h"
#include "transport/mpi/mpi_context.h"
#include "transport/mpi/mpi_data_plane.h"

using namespace hvd;

namespace {

int64_t parse_bytes(const char* s) {
  char* end = nullptr;
  int64_t v = std::strtoll(s, &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max_bytes = 64ll << 20;
  int rounds = 5, iters_arg = 0, factor = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--max") max_bytes = parse_bytes(argv[i + 1]);
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (a == "--iters") iters_arg = std::atoi(argv[i + 1]);
    if (a == "--factor") factor = std::max(2, std::atoi(argv[i + 1]));
  }
  MpiContext ctx;
  Status s = ctx.init(false, 0);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  const int rank = ctx.rank(), n = ctx.size();
  MpiDataPlane plane(&ctx, ctx.base_comm(), 4ll << 20);
  AdasumVhdd vhdd;
  std::vector<unsigned char> slots;
  std::vector<int64_t> per_rank(static_cast<size_t>(n));
  const int p = adasum_power_of_two(n);
  if (rank == 0) {
    std::printf("# np %d; per call, median of %d alternated rounds; MiB received per rank\n", n,
                rounds);
    std::printf("%10s %12s %12s %8s %10s %10s\n", "bytes", "gather_us", "vhdd_us", "ratio",
                "gather_rx", "vhdd_rx");
  }
  for (int64_t bytes = 1024; bytes <= max_bytes; bytes *= factor) {
    const int64_t count = bytes / 4;
    const std::vector<AdasumSegment> segs = {{0, count}};
    std::vector<float> in(static_cast<size_t>(count)), a(in.size()), b(in.size());
    for (int64_t i = 0; i < count; ++i) {
      in[static_cast<size_t>(i)] = static_cast<float>(std::sin(0.37 * i + rank));
    }
    auto gather = [&] {
      slots.resize(static_cast<size_t>(bytes) * static_cast<size_t>(n));
      per_rank.assign(static_cast<size_t>(n), bytes);
      (void)plane.allgatherv(a.data(), slots.data(), per_rank);
      adasum_tree(slots.data(), n, bytes, segs.data(), 1, DataType::kFloat32);
      std::memcpy(a.data(), slots.data(), static_cast<size_t>(bytes));
    };
    auto distributed = [&] {
      (void)vhdd.run(plane, rank, n, b.data(), count, DataType::kFloat32, segs);
    };
    const int iters = iters_arg > 0
                          ? iters_arg
                          : static_cast<int>(std::clamp<int64_t>((8ll << 20) / bytes, 3, 400));
    std::vector<double> tg, tv;
    for (int r = 0; r < rounds; ++r) {
      for (int which = 0; which < 2; ++which) {
        MPI_Barrier(ctx.base_comm());
        const double t0 = MPI_Wtime();
        for (int k = 0; k < iters; ++k) {
          if (which == 0) {
            a = in;
            gather();
          } else {
            b = in;
            distributed();
          }
        }
        double dt = (MPI_Wtime() - t0) / iters;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, ctx.base_comm());
        (which == 0 ? tg : tv).push_back(dt * 1e6);
      }
    }
    double worst = 0;
    for (int64_t i = 0; i < count; ++i) {
      const double w = a[static_cast<size_t>(i)];
      worst =
          std::max(worst, std::fabs(b[static_cast<size_t>(i)] - w) / std::max(1.0, std::fabs(w)));
    }
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, ctx.base_comm());
    // Bytes received by rank 0 (a rank below P that folds one rank in when n > P).
    const double mib = static_cast<double>(bytes) / (1 << 20);
    const double vhdd_rx = (n > p ? mib : 0.0) + 2.0 * mib * (1.0 - 1.0 / p);
    if (rank == 0) {
      std::printf("%10lld %12.1f %12.1f %8.2f %10.2f %10.2f%s\n", static_cast<long long>(bytes),
                  median(tg), median(tv), median(tv) / median(tg), mib * (n - 1), vhdd_rx,
                  worst > 1e-5 ? "  MISMATCH" : "");
    }
    if (worst > 1e-5) return 2;
  }
  ctx.release();
  MPI_Finalize();
  return 0;
}
