// Copyright horovod_cpp authors.
#include "transport/factory/transports.h"

#include "transport/hier/hier_transport.h"
#include "transport/mpi/mpi_transport.h"
#include "transport/shm/shm_transport.h"
#include "horovod_cpp_build_config.h"
#if HOROVOD_CPP_HAVE_NCCL
#include "transport/nccl/nccl_transport.h"
#endif

namespace hvd {

void register_transports(const TransportContext& ctx, TransportRegistry* registry) {
  registry->add(make_shm_transport(ctx));   // CPU collectives on one host
  registry->add(make_hier_transport(ctx));  // CPU collectives of sets spanning hosts
  registry->add(make_mpi_transport(ctx));   // every CPU collective
#if HOROVOD_CPP_HAVE_NCCL
  registry->add(make_nccl_transport(ctx));  // CUDA tensors
#endif
}

}  // namespace hvd
