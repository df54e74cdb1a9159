// Copyright horovod_cpp authors.
#include "transport/factory/transports.h"

#include "horovod_cpp_build_config.h"
#include "transport/hier/hier_transport.h"
#include "transport/mpi/mpi_transport.h"
#include "transport/shm/shm_control_plane.h"
#include "transport/shm/shm_transport.h"
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

void finish_set_planes(const TransportContext& ctx, std::unique_ptr<ControlPlane>* control,
                       std::unique_ptr<TransportRegistry>* transports) {
  const Config& config = *ctx.config;
  if (config.shm_enabled && config.shm_control) {
    *control = make_shm_control_plane(*ctx.bootstrap, ctx.set_id, test_host(ctx),
                                      max_and_words(config.cache_capacity), ctx.cores_shared,
                                      std::move(*control), ctx.lost_peer_code);
  }
  *transports = std::make_unique<TransportRegistry>();
  register_transports(ctx, transports->get());
}

}  // namespace hvd
