// Copyright horovod_cpp authors. The "hier" transport: CPU collectives of a set that spans
// hosts, with the same number (>= 2) of its ranks on every host.
//
// An allreduce runs in three steps: a shared-memory reduce-scatter among the ranks of each
// host (transport/shm/, each local rank ends with its host's partial result for 1/L of the
// vector), an MPI allreduce of that share across hosts among the ranks of equal local rank
// (L independent exchanges, one per local rank, each 1/L of the bytes), and a shared-memory
// allgather back to every rank of the host. An allgather exchanges blocks among the ranks of
// equal local rank over MPI, then within each host through shared memory, then puts them in
// rank order; a broadcast goes to the root's local rank on every host over MPI, then through
// shared memory on each host. Alltoall and reducescatter go over MPI on the set's
// communicator. "MPI" here is the data plane of a Bootstrap group (transport/bootstrap.h): the
// set, or its split into the ranks of equal local rank; MPI in the library, threads in the
// unit tests. Built on CpuTransport (fusion buffer, scaling, Average, joined ranks, result
// allocation) over a DataPlane of its own. Ranks may be placed on hosts in any order.
#pragma once

#include <memory>

#include "transport/transport_context.h"

namespace hvd {

/// Null (on every rank of the set alike, after logging why at info level) when
/// HOROVOD_CPP_SHM or HOROVOD_CPP_SHM_HIERARCHICAL is off, the set is on one host, a host has
/// a single rank of the set, hosts hold different numbers of its ranks, or shared memory
/// cannot be set up on some host.
std::unique_ptr<Transport> make_hier_transport(const TransportContext& ctx);

}  // namespace hvd
