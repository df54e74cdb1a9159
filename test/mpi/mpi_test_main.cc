// Copyright horovod_cpp authors. main() of the multi-rank Catch2 tests.
//
// Every rank runs every test case in the same order. MPI is initialized here (so hvd::init()
// exercises the "MPI already initialized" path) and finalized at the end. The verdict is
// agreed: the exit code is non-zero on every rank if any rank failed, so mpirun and CTest
// report the failure whichever rank saw it. Output of ranks other than 0 is shown only when
// that rank failed.
#define CATCH_CONFIG_RUNNER
// Catch's handler of fatal signals allocates memory; under ThreadSanitizer, whose reports end
// in abort(), that handler deadlocks inside the sanitizer's runtime and the test hangs until
// CTest's timeout instead of failing at once (seen in a CI run). Without it the report and
// the abort end the process.
#if defined(__SANITIZE_THREAD__)
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#endif
#endif
#include <mpi.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  Catch::Session session;
  int rc = session.applyCommandLine(argc, argv);
  int failures = 0;
  std::ostringstream captured;
  std::streambuf* old = nullptr;
  if (rc == 0) {
    if (rank != 0) old = std::cout.rdbuf(captured.rdbuf());
    failures = session.run();
    if (old) std::cout.rdbuf(old);
  } else {
    failures = 1;
  }
  if (rank != 0 && failures) {
    std::cout << "==== output of rank " << rank << " (it failed) ====\n" << captured.str() << std::flush;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("horovod_cpp multi-rank verdict (%d ranks): %s (%d failure(s) across ranks)\n", size,
                total == 0 ? "PASSED" : "FAILED", total);
  }
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
