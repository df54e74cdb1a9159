// Copyright horovod_cpp authors. The "mpi" transport: every CPU collective over MPI.
#pragma once

#include <memory>

#include "transport/transport_context.h"

namespace hvd {

/// A CpuTransport (transport/cpu) over the set's Bootstrap data plane (MpiDataPlane on the
/// set's data communicator, in the MPI world).
std::unique_ptr<Transport> make_mpi_transport(const TransportContext& ctx);

}  // namespace hvd
