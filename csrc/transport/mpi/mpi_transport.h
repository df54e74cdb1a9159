// Copyright horovod_cpp authors. The "mpi" transport: every CPU collective over MPI.
#pragma once

#include <memory>

#include "transport/mpi/transport_context.h"

namespace hvd {

/// A CpuTransport (transport/cpu) over an MpiDataPlane on the set's data communicator.
std::unique_ptr<Transport> make_mpi_transport(const TransportContext& ctx);

}  // namespace hvd
