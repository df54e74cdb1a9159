// Copyright horovod_cpp authors. What each transport of a process set is built from.
//
// A transport is a folder under transport/ with a maker
//   std::unique_ptr<Transport> make_<name>_transport(const TransportContext&);
// that returns null when the transport cannot serve this set (disabled, not on one host, ...)
// after logging why. transport/factory/transports.cc lists the makers, one line each, in the
// order the registry tries them. Transports find their peers through the set's Bootstrap
// (transport/bootstrap.h), never through MPI directly; the World that builds the set (MPI:
// transport/factory/mpi_world.cc; the unit tests: in-process) fills this context.
#pragma once

#include <memory>

#include "transport/bootstrap.h"
#include "transport/registry.h"
#include "common/config.h"

namespace hvd {

/// What a transport of one process set is built from. Everything is owned elsewhere and
/// outlives the transport (the Bootstrap included: a transport may use it after setup, e.g.
/// NCCL makes its communicators on first use).
struct TransportContext {
  int set_id = 0;
  SetLayout layout;
  Bootstrap* bootstrap = nullptr;  ///< the set's members (setup exchanges, data planes)
  const Config* config = nullptr;
  // The job's topology, as the World sees it.
  int world_size = 1;   ///< ranks in the job (the test hosts are counted from it)
  int local_rank = 0;   ///< this rank among the job's ranks on its host (GPU choice)
  int local_size = 1;   ///< the job's ranks on this host
  /// This host's ranks outnumber the cores they may run on: waits yield the core while they
  /// spin (see MpiContext::cores_shared()).
  bool cores_shared = true;
  /// The code of the error a transport gives when a peer's process dies (shm's PeerWatch):
  /// kInternal under the Gloo controller (the survivors may init() again), else kBackend.
  ErrorCode lost_peer_code = ErrorCode::kBackend;
};

/// The host that HOROVOD_CPP_TEST_RANKS_PER_HOST gives this rank of the set (its global rank
/// divided by that number; with HOROVOD_CPP_TEST_HOSTS_ROUND_ROBIN, its global rank modulo the
/// number of hosts), or -1 (the real host) when it is not set.
int test_host(const TransportContext& ctx);

/// The members of `group` on this rank's host, in `group`'s order: the real host
/// (Bootstrap::split_host()) when `host` < 0, else the members that passed the same `host`.
/// Collective over `group`.
Status split_by_host(Bootstrap& group, int host, std::unique_ptr<Bootstrap>* local);

}  // namespace hvd
