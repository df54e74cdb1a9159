// Copyright horovod_cpp authors. The "nccl" transport: collectives on CUDA tensors through NCCL.
//
// One per process set. It keeps one NCCL communicator per CUDA device, made on first use (set
// rank 0's unique id broadcast over the set's Bootstrap), and one dedicated CUDA
// stream. run() enqueues a batch on that stream (after the producers' streams), records an
// event and returns; a finalizer thread reports the outcome once the event has completed, so
// the background thread goes on negotiating meanwhile. Insides: nccl_internal.h. No CUDA or
// NCCL type appears in this header.
#pragma once

#include <memory>

#include "transport/transport_context.h"

namespace hvd {

/// Makes the transport; touches no CUDA state until the first GPU batch arrives.
std::unique_ptr<Transport> make_nccl_transport(const TransportContext& ctx);

}  // namespace hvd
