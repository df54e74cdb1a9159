// Copyright horovod_cpp authors. The "shm" transport: CPU allreduces and reducescatters
// through shared memory.
//
// Takes allreduces and reducescatters of CPU tensors of at least HOROVOD_CPP_SHM_MIN_BYTES (a
// fused batch counts its total) when every member of the set is on this host; smaller ones and
// every other collective fall through to the next transport (MPI). Allgather, broadcast and
// alltoall stay with MPI: Open MPI moves their bytes with one copy (CMA) within a host, where
// a shared segment needs two. Reducescatters never copy their input for a prescale. Reduces the tensors where they are: no
// fusion buffer, and Average/postscale are applied while the result is written.
#pragma once

#include <memory>

#include "backends/mpi/transport_context.h"

namespace hvd {

/// Null (after logging why) when shared memory is off or the set spans hosts.
std::unique_ptr<Transport> make_shm_transport(const TransportContext& ctx);

}  // namespace hvd
