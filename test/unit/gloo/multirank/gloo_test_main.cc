// Copyright horovod_cpp authors. main() of the multi-rank suite (test/mpi's MPI-free cases)
// run as a Gloo job: started by hvdrun --gloo (or any launcher of issue 36's contract), never
// by mpirun, and never touching MPI. Every rank runs every test case in the same order; its
// exit status is its own verdict, and the launcher fails the job when any rank fails. The
// output of ranks other than 0 is shown only when that rank failed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

int main(int argc, char** argv) {
  const char* r = std::getenv("HOROVOD_RANK");
  const int rank = r ? std::atoi(r) : 0;
  Catch::Session session;
  const int rc = session.applyCommandLine(argc, argv);
  int failures = 1;
  std::ostringstream captured;
  if (rc == 0) {
    std::streambuf* old = rank != 0 ? std::cout.rdbuf(captured.rdbuf()) : nullptr;
    failures = session.run();
    if (old) std::cout.rdbuf(old);
  }
  if (rank != 0 && failures) {
    std::cout << "==== output of rank " << rank << " (it failed) ====\n"
              << captured.str() << std::flush;
  }
  std::printf("horovod_cpp Gloo multi-rank verdict of rank %d: %s (%d failure(s))\n", rank,
              failures == 0 ? "PASSED" : "FAILED", failures);
  return failures == 0 ? 0 : 1;
}
