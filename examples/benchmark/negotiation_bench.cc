// Copyright horovod_cpp authors. How fast can ranks AND a few words, nonblocking?
//
// The negotiation of every cycle is one bitwise-AND allreduce of a small word vector, waited
// on by polling (so that a rank waiting for an idle peer can back off and sleep). This times
// the ways to do it with raw MPI, interleaved after a barrier, and prints the median of the
// slowest rank per step: MPI_Iallreduce + MPI_Test, blocking MPI_Allreduce (no polling
// possible: for reference), MPI_Ibarrier + MPI_Test (the least a nonblocking collective
// costs), and point-to-point recursive doubling with MPI_Isend/MPI_Irecv + MPI_Testall (what
// csrc/transport/mpi/mpi_control_plane.cc does). Power-of-two rank counts only.
//
//   mpirun -np 2 build/examples/benchmark/negotiation_bench [words] [iterations]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void test_until_done(MPI_Request* requests, int count) {
  int done = 0;
  while (!done) MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int words = argc > 1 ? std::atoi(argv[1]) : 4;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 3000;
  if (words < 1 || iters < 1 || (size & (size - 1)) != 0) {
    if (rank == 0) std::fprintf(stderr, "usage: words >= 1, iterations >= 1, ranks a power of 2\n");
    MPI_Finalize();
    return 2;
  }
  MPI_Comm ctl;
  MPI_Comm_dup(MPI_COMM_WORLD, &ctl);
  std::vector<uint64_t> mine(static_cast<size_t>(words)), theirs(mine.size());
  const char* names[] = {"MPI_Iallreduce + MPI_Test", "MPI_Allreduce (blocking)",
                         "MPI_Ibarrier + MPI_Test", "Isend/Irecv recursive doubling"};
  constexpr int kVariants = 4;
  std::vector<double> times[kVariants];
  int wrong = 0;
  for (int it = -100; it < iters; ++it) {
    for (int v = 0; v < kVariants; ++v) {
      for (int i = 0; i < words; ++i) mine[static_cast<size_t>(i)] = ~(uint64_t{1} << (rank % 64)) - static_cast<uint64_t>(i);
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      if (v == 0) {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, mine.data(), words, MPI_UINT64_T, MPI_BAND, ctl, &r);
        test_until_done(&r, 1);
      } else if (v == 1) {
        MPI_Allreduce(MPI_IN_PLACE, mine.data(), words, MPI_UINT64_T, MPI_BAND, ctl);
      } else if (v == 2) {
        MPI_Request r;
        MPI_Ibarrier(ctl, &r);
        test_until_done(&r, 1);
      } else {
        for (int mask = 1; mask < size; mask <<= 1) {
          MPI_Request r[2];
          MPI_Irecv(theirs.data(), words, MPI_UINT64_T, rank ^ mask, 7, ctl, &r[0]);
          MPI_Isend(mine.data(), words, MPI_UINT64_T, rank ^ mask, 7, ctl, &r[1]);
          test_until_done(r, 2);
          MPI_Reduce_local(theirs.data(), mine.data(), words, MPI_UINT64_T, MPI_BAND);
        }
      }
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (v != 2) {  // every rank computes the expected AND itself
        for (int i = 0; i < words; ++i) {
          uint64_t want = ~uint64_t{0};
          for (int r = 0; r < size; ++r) want &= ~(uint64_t{1} << (r % 64)) - static_cast<uint64_t>(i);
          if (mine[static_cast<size_t>(i)] != want) ++wrong;
        }
      }
      if (it >= 0) times[v].push_back(dt);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (int v = 0; v < kVariants; ++v) {  // the slowest rank of each step
    MPI_Allreduce(MPI_IN_PLACE, times[v].data(), iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    std::sort(times[v].begin(), times[v].end());
    if (rank == 0) {
      std::printf("%-32s median %7.2f us   p10 %7.2f us\n", names[v],
                  times[v][static_cast<size_t>(iters / 2)] * 1e6,
                  times[v][static_cast<size_t>(iters / 10)] * 1e6);
    }
  }
  if (rank == 0) std::printf("%d ranks, %d words, %d iterations, wrong results: %d\n", size, words, iters, wrong);
  MPI_Comm_free(&ctl);
  MPI_Finalize();
  return wrong == 0 ? 0 : 1;
}
