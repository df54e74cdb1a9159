// Copyright horovod_cpp authors. The list of transports, and what each maker gets.
//
// register_transports() (transports.cc) is the one place that names every transport, in the
// order the registry tries them. A transport is a folder under backends/ with a maker
//   std::unique_ptr<Transport> make_<name>_transport(const TransportContext&);
// that returns null when the transport cannot serve this set (disabled, not on one host, ...)
// after logging why; adding one is that folder plus one line in register_transports().
#pragma once

#include <mpi.h>

#include <memory>

#include "backends/mpi/mpi_context.h"
#include "backends/registry.h"
#include "common/config.h"

namespace hvd {

/// What a transport of one process set is built from. Everything is owned elsewhere and
/// outlives the transport.
struct TransportContext {
  int set_id = 0;
  SetLayout layout;
  MPI_Comm data_comm = MPI_COMM_NULL;  ///< the set's data communicator (bootstrap, MPI data)
  const MpiContext* mpi = nullptr;     ///< operators, topology
  const Config* config = nullptr;
};

/// Adds this build's transports for one set to `registry`, in priority order. Collective over
/// the set's data communicator (some transports exchange setup data).
void register_transports(const TransportContext& ctx, TransportRegistry* registry);

}  // namespace hvd
