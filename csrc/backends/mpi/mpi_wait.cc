// Copyright horovod_cpp authors.
#include "backends/mpi/mpi_wait.h"

#include <sched.h>
#include <time.h>

#include <chrono>

#include "backends/mpi/mpi_context.h"

namespace hvd {

Status mpi_wait(MPI_Request* request, const char* what, bool yield_core) {
  return mpi_wait_all(request, 1, what, yield_core);
}

Status mpi_wait_all(MPI_Request* requests, int count, const char* what, bool yield_core) {
  using clock = std::chrono::steady_clock;
  constexpr auto kSpin = std::chrono::microseconds(50);
  constexpr long kMaxSleepNs = 200 * 1000;
  const auto start = clock::now();
  long sleep_ns = 5 * 1000;
  int done = 0;
  unsigned polls = 0;
  while (true) {
    const int rc = MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      return Status::Backend(std::string(what) + " failed: " + mpi_error_string(rc));
    }
    if (done) return Status::OK();
    if ((++polls & 15u) != 0 || clock::now() - start < kSpin) {
      // Not otherwise: a yield hands the core to any runnable thread (another rank's, this
      // process's background thread) for a whole time slice, which on two ranks sharing two
      // cores cost 1 MiB broadcasts 10-30 us of a 110 us collective.
      if (yield_core && (polls & 15u) == 0) sched_yield();
      continue;
    }
    timespec ts{0, sleep_ns};
    nanosleep(&ts, nullptr);
    sleep_ns = sleep_ns * 2 > kMaxSleepNs ? kMaxSleepNs : sleep_ns * 2;
  }
}

}  // namespace hvd
