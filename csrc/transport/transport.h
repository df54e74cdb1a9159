// Copyright horovod_cpp authors. The data-plane interface every transport implements.
//
// The executor (core/) turns each batch of the fusion plan into a Batch and asks the process
// set's TransportRegistry (transport/registry.h) for the first transport that takes it; the
// transport runs it and reports the outcome through the batch's `done` callback, exactly once,
// synchronously (before run() returns: MPI, shared memory) or later from a thread of its own
// (NCCL). A transport never sees the core's handles: results travel back in a BatchOutcome and
// the core completes its handles from it. No MPI, NCCL or CUDA type appears here.
//
// Adding a transport: docs/design.md, "How to add a transport".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordination/message.h"
#include "fusion/fusion_planner.h"
#include "horovod_cpp/tensor.h"

namespace hvd {

/// The layout of the process set a transport serves, for accepts().
struct SetLayout {
  int rank = 0;                   ///< this rank's index in the set
  int size = 1;                   ///< members
  std::vector<int> global_ranks;  ///< set rank -> global rank
};

/// One tensor of a batch. `response` says what every rank runs; `input`/`output` are this
/// rank's memory (kept alive by the caller until the batch completes). `present` is false for
/// an allreduce that this rank (having joined) did not submit: it contributes zeros and gets
/// no result.
///
/// The views carry the data pointer, dtype, device and stream; their shapes are empty (a
/// tiny tensor's submission would otherwise allocate a shape per view): sizes come from the
/// response, which every rank agreed on (nbytes()).
struct BatchTensor {
  const Response* response = nullptr;
  TensorView input;
  TensorView output;  ///< == input for in-place operations; unused by allgather
  bool present = true;

  /// Bytes of an allreduce's or a broadcast's tensor: the agreed shape, the same on every rank.
  int64_t nbytes() const { return response->nbytes_for_rank(0); }
};

/// What a transport hands back for one tensor of the batch.
struct TensorResult {
  bool has_tensor = false;       ///< allgather, alltoall, reducescatter allocate a result
  Tensor tensor;
  std::vector<int64_t> splits;   ///< alltoall: rows received from each rank
};

/// The outcome of a batch: a status for all of its tensors and, per tensor (in batch order),
/// the library-allocated results (empty vector when the operation allocates none).
struct BatchOutcome {
  Status status;
  std::vector<TensorResult> results;
};

/// Records one timeline phase of a tensor ("MPI_ALLREDUCE", t0, t1 in us, JSON args).
using PhaseSink = std::function<void(const std::string& tensor, const char* phase, int64_t t0,
                                     int64_t t1, const std::string& args)>;

/// One batch of the fusion plan: a single tensor, or allreduces fused into one reduction
/// (`plan.offsets`, `plan.bytes`). Every rank builds the same batches in the same order.
struct Batch {
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  Device device;
  /// Bytes this rank contributes in total (fused: the fusion plan's bytes).
  int64_t bytes = 0;
  FusionBatch plan;
  std::vector<BatchTensor> tensors;
  /// Broadcast: the root as a rank of the set (-1 when it is not a member).
  int root = -1;
  /// Timeline phases; null when the timeline is off.
  PhaseSink phase;
  /// Called exactly once with the outcome, from any thread.
  std::function<void(BatchOutcome)> done;

  bool fused() const { return plan.fused(); }
  const Response& first() const { return *tensors.front().response; }
  /// "allreduce 'a'" or "fused allreduce of 'a', 'b', ..." for messages.
  std::string describe() const;
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
  /// makes by measurement (at most Controller::kVoteBits; shm: gather_paths.h). The cycle ORs
  /// them across ranks and hands the result to set_agreed_paths() before its batches run, so
  /// that every rank makes the same choice. Called on the cycle's thread only.
  virtual uint32_t path_votes() { return 0; }
  virtual void set_agreed_paths(uint32_t votes) { (void)votes; }
};

}  // namespace hvd
