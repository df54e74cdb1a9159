// Copyright horovod_cpp authors. The World over Gloo: jobs without MPI (issue 36).
//
// The ranks find each other through the rendezvous store that hvdrun --gloo serves (or any
// server of the contract's protocol, transport/gloo/store_client.h); their places come from
// HOROVOD_RANK & co. or from the store's assign/<worker id>/<n> key. Every group connects
// under the key prefix g<generation>/..., so a re-init never reads an earlier generation's
// keys. Process sets are built as MpiWorld builds them: a control plane of their own, the
// shm control plane and transports for ranks of one host, the hier transport across hosts,
// and the generic CPU transport over a Gloo data plane instead of MPI. No MPI call is made.
#pragma once

#include <memory>

#include "transport/world.h"

namespace hvd {

/// Builds the Gloo World from the environment (GlooConfig). Installs the job aborter of
/// fixed mode: print the reason and _exit(1) (the launcher ends the other workers).
Status make_gloo_world(const InitOptions& options, std::unique_ptr<World>* out);

/// True while the job runs on the Gloo World (between its init() and shutdown()).
bool gloo_world_active();

}  // namespace hvd
