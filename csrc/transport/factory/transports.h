// Copyright horovod_cpp authors. The one list of this build's transports (transports.cc).
#pragma once

#include "transport/transport_context.h"
#include "transport/registry.h"

namespace hvd {

/// Adds this build's transports for one set to `registry`, in priority order. Collective over
/// the set's data communicator (some transports exchange setup data).
void register_transports(const TransportContext& ctx, TransportRegistry* registry);

}  // namespace hvd
