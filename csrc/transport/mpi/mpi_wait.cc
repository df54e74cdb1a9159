// Copyright horovod_cpp authors.
#include "transport/mpi/mpi_wait.h"

#include <chrono>

#include "transport/backoff.h"
#include "transport/mpi/mpi_context.h"

namespace hvd {

Status mpi_wait(MPI_Request* request, const char* what, bool yield_core) {
  return mpi_wait_all(request, 1, what, yield_core);
}

Status mpi_wait_all(MPI_Request* requests, int count, const char* what, bool yield_core) {
  Backoff wait(std::chrono::microseconds(50), 15, yield_core);
  while (true) {
    int done = 0;
    const int rc = MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      return Status::Backend(std::string(what) + " failed: " + mpi_error_string(rc));
    }
    if (done) return Status::OK();
    wait.pause();
  }
}

}  // namespace hvd
