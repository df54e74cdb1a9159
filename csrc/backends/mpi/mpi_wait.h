// Copyright horovod_cpp authors. Waiting on MPI requests without burning a core.
#pragma once

#include <mpi.h>

#include <string>

#include "common/status.h"

namespace hvd {

/// Completes `request`: polls MPI_Test for a short spin (the peers usually arrive within
/// microseconds), then sleeps between polls with a growing back-off (at most 200 us), so a
/// rank waiting for an idle peer yields its core instead of spinning. `what` names the call
/// in errors.
Status mpi_wait(MPI_Request* request, const char* what);

}  // namespace hvd
