// Copyright horovod_cpp authors. The factory the runtime builds process sets with.
//
// The runtime (core/) knows the job only through this interface: the topology, the few setup
// exchanges it runs over every rank, and make_set(), which builds a process set's control
// plane and its ordered transports. transport/mpi implements it over MPI (make_world); unit
// tests build SetPlanes of their own (in-process planes) and hand them to a ProcessSetState
// directly. No MPI type appears here, so core/ compiles without mpi.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/registry.h"
#include "common/config.h"
#include "common/status.h"
#include "transport/control_plane.h"
#include "horovod_cpp/options.h"

namespace hvd {

/// What one process set talks through. Destroyed after the set's thread has stopped; an
/// implementation releases its communicators in its destructor.
class SetPlanes {
 public:
  virtual ~SetPlanes() = default;
  std::unique_ptr<ControlPlane> control;
  std::unique_ptr<TransportRegistry> transports;
};

class World {
 public:
  virtual ~World() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual int cross_rank() const = 0;
  virtual int cross_size() const = 0;
  /// Collective over every rank: every rank's `mine` (the same length everywhere), rank-major.
  virtual Status allgather(const std::vector<int64_t>& mine, std::vector<int64_t>* all) = 0;
  /// Collective over every rank: replaces `values` (`count` of them) by rank 0's.
  virtual Status broadcast(std::vector<int>* values, int count) = 0;
  /// Collective over every rank: builds the planes of set `id` (members `ranks`, sorted); null
  /// on ranks that are not members.
  virtual Status make_set(int id, const std::vector<int>& ranks, const Config& config,
                          std::unique_ptr<SetPlanes>* out) = 0;
  /// Collective over every rank (called under the runtime's collective lock): whether the
  /// elastic driver asked this generation's membership to change (issue 37), rank 0's answer
  /// on every rank. Worlds that are not elastic answer false without communicating.
  virtual Status elastic_hosts_updated(bool* updated) {
    *updated = false;
    return Status::OK();
  }
  /// The generation of the elastic assignment this World runs (0 when not elastic).
  virtual int64_t elastic_generation() const { return 0; }
  /// Whether this World is a membership given by an elastic driver (HOROVOD_ELASTIC=1).
  virtual bool elastic() const { return false; }
};

/// The job's World (transport/factory/mpi_world.cc): over Gloo when HOROVOD_GLOO=1 or
/// HOROVOD_CONTROLLER=gloo (then MPI is never touched), else over MPI (initialized if needed).
Status make_world(const InitOptions& options, std::unique_ptr<World>* out);

}  // namespace hvd
