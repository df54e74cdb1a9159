// Copyright horovod_cpp authors. How the transports of a process set find their peers.
//
// A Bootstrap is one group of ranks (a process set's members, or a subgroup of them: the
// ranks of one host, the ranks of equal local rank on every host) and the few exchanges a
// transport needs to set itself up over that group: a byte allgather, a byte broadcast, a
// barrier, splits into subgroups, and the group's own data plane. Transports (shm, hier,
// nccl) are written against this interface only, so they build over MPI in the library
// (transport/mpi/mpi_bootstrap.h) and over threads of one process in the unit tests
// (test/unit/in_process_bootstrap.h), and over any other launcher that implements it.
//
// The contract:
//  - Every call is collective over the group: every member makes it, with the same
//    arguments where the call says so, in the same order as the other members.
//  - Setup only: used while a set is being built (and when a transport makes something on
//    first use, such as an NCCL communicator), never per tensor; calls may allocate and block.
//  - Every call returns a Status; a failure's message names the call and the group. A failed
//    call may fail on some members only: a caller that must decide alike on every member
//    agrees on the outcome afterwards (all_agree()).
//  - Not thread-safe: one thread at a time uses a Bootstrap (each member its own object).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "transport/data_plane.h"
#include "common/status.h"

namespace hvd {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  /// This member's index in the group, 0 <= rank() < size().
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The group, for messages: "process set 2", "process set 2 / host".
  virtual const std::string& name() const = 0;

  /// Every member's `bytes` bytes (the same count on every member) into `all`
  /// (size() * bytes), in rank order.
  virtual Status allgather(const void* mine, size_t bytes, void* all) = 0;
  /// Replaces `bytes` bytes of `buf` (the same count on every member) by `root`'s.
  virtual Status broadcast(void* buf, size_t bytes, int root) = 0;
  /// Returns once every member has called it.
  virtual Status barrier() = 0;
  /// The members that passed the same `color` (>= 0) as this one, ordered by `key` (ties:
  /// by rank in this group), as a group of their own. The new group outlives this one freely.
  virtual Status split(int color, int key, std::unique_ptr<Bootstrap>* out) = 0;
  /// The members that can share memory with this one (the ranks of this host), in this
  /// group's order.
  virtual Status split_host(std::unique_ptr<Bootstrap>* out) = 0;
  /// The group's own data plane (MPI: collectives over the group's communicator). It uses
  /// this Bootstrap's resources: it must not outlive this object.
  virtual Status make_data_plane(std::unique_ptr<DataPlane>* out) = 0;
};

/// Collective over `group`: true on every member iff `ok` on every member (false where the
/// exchange itself fails: such a group fails its exchanges on every member).
bool all_agree(Bootstrap& group, bool ok);

}  // namespace hvd
