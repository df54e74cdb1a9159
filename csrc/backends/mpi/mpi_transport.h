// Copyright horovod_cpp authors. The "mpi" transport: every CPU collective over MPI.
#pragma once

#include <memory>

#include "backends/mpi/transport_context.h"

namespace hvd {

/// A CpuTransport (backends/cpu) over an MpiDataPlane on the set's data communicator.
std::unique_ptr<Transport> make_mpi_transport(const TransportContext& ctx);

}  // namespace hvd
