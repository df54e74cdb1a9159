// Copyright horovod_cpp authors. What each transport of a process set is built from.
//
// A transport is a folder under transport/ with a maker
//   std::unique_ptr<Transport> make_<name>_transport(const TransportContext&);
// that returns null when the transport cannot serve this set (disabled, not on one host, ...)
// after logging why. transport/factory/transports.cc lists the makers, one line each, in the
// order the registry tries them. Transports bootstrap over the set's MPI data communicator.
#pragma once

#include <mpi.h>

#include <memory>

#include "transport/mpi/mpi_context.h"
#include "transport/registry.h"
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

}  // namespace hvd
