// Copyright horovod_cpp authors. Waiting on MPI requests without burning a core.
#pragma once

#include <mpi.h>

#include <string>

#include "common/status.h"

namespace hvd {

/// Completes `request`: polls MPI_Test for a short spin (the peers usually arrive within
/// microseconds), then sleeps between polls with a growing back-off (at most 200 us), so a
/// rank waiting for an idle peer gives up its core instead of spinning. With `yield_core`
/// (ranks outnumber cores: MpiContext::cores_shared()) the spin also yields every few polls,
/// so that a peer sharing the core can run. `what` names the call in errors.
Status mpi_wait(MPI_Request* request, const char* what, bool yield_core);

/// mpi_wait() for `count` requests at once (all must complete).
Status mpi_wait_all(MPI_Request* requests, int count, const char* what, bool yield_core);

}  // namespace hvd
