// Copyright horovod_cpp authors. The one list of this build's transports (transports.cc).
#pragma once

#include <memory>

#include "transport/control_plane.h"
#include "transport/registry.h"
#include "transport/transport_context.h"

namespace hvd {

/// Adds this build's transports for one set to `registry`, in priority order. Collective over
/// the set's data communicator (some transports exchange setup data).
void register_transports(const TransportContext& ctx, TransportRegistry* registry);

/// Completes a set's planes alike under every World, once the World has made `ctx` and its
/// own control plane in `*control`: where the config enables it, the shared-memory negotiation
/// takes over `*control` (keeping it as its fallback; the same choice on every rank), and
/// `*transports` gets this build's transports. Collective over the set.
void finish_set_planes(const TransportContext& ctx, std::unique_ptr<ControlPlane>* control,
                       std::unique_ptr<TransportRegistry>* transports);

}  // namespace hvd
