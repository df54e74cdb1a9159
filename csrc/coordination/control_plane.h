// Copyright horovod_cpp authors. The control plane: the three collective exchanges the
// negotiation needs, and nothing else.
//
// The Controller talks only to this interface. MpiControlPlane implements it over an MPI
// communicator (transport/mpi); InProcessControlPlane (test/unit) over threads of one
// process, so the negotiation is unit-tested with N ranks and no MPI. All calls are
// collective: every rank of the group calls them in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hvd {

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Bitwise AND of `words` across ranks, in place. Every rank passes the same length.
  virtual Status allreduce_and(std::vector<uint64_t>* words) = 0;
  /// Gathers every rank's `mine` at rank 0: `all` (rank 0 only) is indexed by rank.
  virtual Status gather(const std::string& mine, std::vector<std::string>* all) = 0;
  /// Replaces `blob` on every rank by rank 0's.
  virtual Status broadcast(std::string* blob) = 0;
};

}  // namespace hvd
