// Copyright horovod_cpp authors. The data-plane interface every transport implements.
//
// The executor (core/) turns each batch of the fusion plan into a Batch (batch.h: plain values
// only) and asks the process set's TransportRegistry (registry.h) for the first transport that
// takes it; the transport runs it and reports the outcome through the batch's `done`
// callback, exactly once, synchronously (before run() returns: MPI, shared memory) or later
// from a thread of its own (NCCL). A transport never sees the core's handles: results travel
// back in a BatchOutcome and the core completes its handles from it. No MPI, NCCL or CUDA
// type appears here.
//
// Adding a transport: docs/design.md, "How to add a transport".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "horovod_cpp/types.h"
#include "transport/batch.h"

namespace hvd {

/// The layout of the process set a transport serves, for accepts().
struct SetLayout {
  int rank = 0;                   ///< this rank's index in the set
  int size = 1;                   ///< members
  std::vector<int> global_ranks;  ///< set rank -> global rank
};

/// A way of moving and reducing bytes among the ranks of one process set.
///
/// run() is called from the set's background thread only, in the same batch order on every
/// rank; accepts() and check_device() may be called from any thread.
class Transport {
 public:
  virtual ~Transport() = default;
  /// A short name for logs ("shm", "mpi", "nccl").
  virtual const char* name() const = 0;
  /// True when this transport runs `batch` (device, collective, dtype, size, set layout).
  /// Must give the same answer on every rank for the same batch.
  virtual bool accepts(const Batch& batch) const = 0;
  /// Runs the batch and calls batch.done exactly once, now or later. A transport that goes on
  /// after returning (NCCL) moves the batch out of `batch`; one that finishes before returning
  /// has called done and leaves `batch` as it was, so that the caller reuses its vectors for
  /// the next batch (a fused batch of a thousand tensors is ~100 KiB of them per cycle).
  virtual void run(Batch& batch) = 0;
  /// Whether a tensor on `device` may be used by this rank (`what` names the tensor in the
  /// message); only asked of the transport that claims the device kind.
  virtual bool claims_device(const Device& device) const { return device.is_cpu(); }
  virtual Status check_device(const Device& device, const std::string& what) const {
    (void)device;
    (void)what;
    return Status::OK();
  }
  /// Waits until every batch given to run() has called done (shutdown).
  virtual void drain() {}
  /// This rank's votes for the next negotiation cycle, a bit for each choice this transport
  /// makes by measurement (at most kTransportVoteBits, control_plane.h; shm: gather_paths.h).
  /// The cycle ORs them across ranks and hands the result to set_agreed_paths() before its
  /// batches run, so that every rank makes the same choice. Called on the cycle's thread only.
  virtual uint64_t path_votes() { return 0; }
  virtual void set_agreed_paths(uint64_t votes) { (void)votes; }
};

}  // namespace hvd
