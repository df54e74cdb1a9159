// Copyright horovod_cpp authors. Optional public header for programs that use MPI themselves.
// It is the only public header that includes <mpi.h>, and it is not part of horovod_cpp.h.
#pragma once

#include <mpi.h>

#include "horovod_cpp/api.h"

namespace hvd {

/// Starts horovod_cpp on the ranks of `comm` (which must already be initialized by the
/// program; horovod_cpp duplicates it and never frees or finalizes the original).
inline void init(MPI_Comm comm) {
  InitOptions options;
  options.mpi_comm_fortran = static_cast<long long>(MPI_Comm_c2f(comm));
  options.use_comm = true;
  init(options);
}

}  // namespace hvd
