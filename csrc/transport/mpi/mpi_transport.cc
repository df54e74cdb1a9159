// Copyright horovod_cpp authors.
#include "transport/mpi/mpi_transport.h"

#include "transport/cpu/cpu_transport.h"
#include "common/logging.h"

namespace hvd {

std::unique_ptr<Transport> make_mpi_transport(const TransportContext& ctx) {
  std::unique_ptr<DataPlane> plane;
  const Status s = ctx.bootstrap->make_data_plane(&plane);
  if (!s.ok()) {  // MPI's makes no call that can fail: never on one rank only
    HVD_LOG(kError) << "process set " << ctx.set_id << ": no MPI transport: " << s.message();
    return nullptr;
  }
  return std::make_unique<CpuTransport>(std::move(plane), ctx.layout);
}

}  // namespace hvd
