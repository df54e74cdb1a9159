// Copyright horovod_cpp authors. The "shm" transport: CPU collectives through shared memory.
//
// Takes allreduces and reducescatters of CPU tensors of at least HOROVOD_CPP_SHM_MIN_BYTES (a
// fused batch counts its total), and broadcasts, allgathers and alltoalls (sized by the bytes
// per rank on average, so every rank decides alike), when every member of the set is on this
// host; barriers and smaller reductions fall through to the next transport (MPI), and so do
// broadcasts, allgathers and alltoalls above HOROVOD_CPP_SHM_GATHER_MAX_BYTES when it is set
// (no limit by default: two copies through the segment beat MPI at every size measured).
// Reduces the tensors where they are: no fusion buffer, Average/postscale applied while the
// result is written; reducescatters never copy their input for a prescale.
//
// Collectives of at least HOROVOD_CPP_SHM_MEASURED_MIN_BYTES (allgathers and alltoalls: their
// longest block times the ranks) run either through the segments or through the MPI data
// plane under this transport, as the measured paths choose, agreed by every rank
// (gather_paths.h); reductions of floats only at two ranks, where MPI's result has the
// rank-order fold's bits.
#pragma once

#include <memory>

#include "transport/transport_context.h"

namespace hvd {

/// Null (after logging why) when shared memory is off or the set spans hosts.
std::unique_ptr<Transport> make_shm_transport(const TransportContext& ctx);

}  // namespace hvd
