// Copyright horovod_cpp authors.
#include "transport/mpi/mpi_transport.h"

#include "transport/cpu/cpu_transport.h"
#include "transport/mpi/mpi_data_plane.h"

namespace hvd {

std::unique_ptr<Transport> make_mpi_transport(const TransportContext& ctx) {
  return std::make_unique<CpuTransport>(
      std::make_unique<MpiDataPlane>(ctx.mpi, ctx.data_comm, ctx.config->reduce_chunk_bytes),
      ctx.layout);
}

}  // namespace hvd
