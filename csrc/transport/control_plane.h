// Copyright horovod_cpp authors. The control plane: the three collective exchanges the
// negotiation needs, and nothing else, and the sizes its users agree on.
//
// The Controller (coordination/) talks only to this interface. MpiControlPlane implements it
// over an MPI communicator (transport/mpi); InProcessControlPlane (test/unit) over threads of
// one process, so the negotiation is unit-tested with N ranks and no MPI. All calls are
// collective: every rank of the group calls them in the same order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hvd {

/// Bits a transport may use for its votes (Transport::path_votes()). The controller carries
/// them in the flags word of the bit vector every cycle ANDs, above its own flags.
constexpr int kTransportVoteBits = 56;
/// Those bits, from bit 0.
constexpr uint64_t kTransportVoteMask = (uint64_t{1} << kTransportVoteBits) - 1;

/// The most words a cycle's allreduce_and() vector has with a response cache of
/// `cache_capacity` entries: a flags word, then three bits per cache entry. A control plane
/// that sizes its room ahead (shm) takes this bound; the controller never exceeds it.
inline size_t max_and_words(int64_t cache_capacity) {
  return 1 + 3 * static_cast<size_t>((std::max<int64_t>(cache_capacity, 0) + 63) / 64);
}

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
