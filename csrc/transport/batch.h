// Copyright horovod_cpp authors. What a transport is given to run: a batch of plain values.
//
// The executor (core/) fills a Batch from the negotiated responses and the fusion plan; a
// transport reads only what is here (the collective, dtype, device, sizes and offsets, the
// root, the reduction spec) and knows nothing of the negotiation or the planner. Every rank
// fills the same batches with the same values, in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/op_type.h"
#include "common/status.h"
#include "horovod_cpp/tensor.h"
#include "horovod_cpp/types.h"

namespace hvd {

/// How a reduction is carried out, derived once from the response (make_reduction_spec) so
/// that every transport applies the same rule: each input is multiplied by `prescale`, the
/// inputs are reduced with `op` (a transport that sums reduces Average as Sum), then the
/// result is finished as finish_reduction() (kernels/host/cpu_ops.h) does with `scale` and
/// `divisor`.
struct ReductionSpec {
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;   ///< multiplies every input before the reduction (1: none)
  double postscale = 1.0;  ///< the submitted postscale, for a transport that averages itself
  /// Finishes a summed reduction: the postscale, divided by the set's size for Average.
  /// Integers are scaled only when a postscale asks (otherwise 1).
  double scale = 1.0;
  /// An integer Average without a postscale: the sum is divided by this exactly (truncating
  /// toward zero); 1 otherwise.
  int64_t divisor = 1;
};

/// The ReductionSpec of a reduction `op` with the given factors on `dtype` over `set_size`
/// ranks: Average is Sum then a division by the set size, folded into the postscale for
/// floating types (and for integers given a postscale, which scale in double and truncate),
/// an exact integer division otherwise; bool takes no factors.
ReductionSpec make_reduction_spec(ReduceOp op, DataType dtype, double prescale, double postscale,
                                  int set_size);

/// One tensor of a batch. `input`/`output` are this rank's memory (kept alive by the caller
/// until the batch completes). `present` is false for an allreduce that this rank (having
/// joined) did not submit: it contributes zeros and gets no result.
///
/// The views carry the data pointer, dtype, device and stream; their shapes are empty (a
/// tiny tensor's submission would otherwise allocate a shape per view): sizes are `count` and
/// `bytes`, which every rank agreed on.
struct BatchTensor {
  /// The tensor's name, for messages and the timeline; valid while run() runs.
  const std::string* name = nullptr;
  TensorView input;
  TensorView output;  ///< == input for in-place operations; unused by allgather
  /// Allreduce, broadcast, reducescatter: elements and bytes of the agreed shape.
  int64_t count = 0;
  int64_t bytes = 0;
  bool present = true;
};

/// What a transport hands back for one tensor of the batch.
struct TensorResult {
  bool has_tensor = false;  ///< allgather, alltoall, reducescatter allocate a result
  Tensor tensor;
  std::vector<int64_t> splits;  ///< alltoall: rows received from each rank
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

/// One batch: a single tensor, or allreduces fused into one reduction through a fusion
/// buffer (`offsets`, `bytes`).
struct Batch {
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  Device device;
  /// Bytes this rank contributes in total (fused: the fusion buffer's size).
  int64_t bytes = 0;
  /// Each tensor's byte offset in the fusion buffer.
  std::vector<int64_t> offsets;
  /// Allreduce, reducescatter: how to reduce.
  ReductionSpec reduction;
  /// Broadcast: the root as a rank of the set (-1 when it is not a member), and as submitted
  /// (a global rank, for messages).
  int root = -1;
  int global_root = -1;
  /// Allgather, alltoall, reducescatter (never fused): the agreed shape (allgather: rank 0's
  /// input's), and for allgather dimension 0 of each member's input and the bytes each member
  /// contributes, for alltoall the size x size matrix of rows (row i, column k = what member
  /// i sends member k). Empty for other collectives.
  Shape shape;
  std::vector<int64_t> first_dims;
  std::vector<int64_t> rank_bytes;
  std::vector<int64_t> all_splits;
  std::vector<BatchTensor> tensors;
  /// Timeline phases; null when the timeline is off.
  PhaseSink phase;
  /// Called exactly once with the outcome, from any thread.
  std::function<void(BatchOutcome)> done;

  bool fused() const { return tensors.size() > 1; }
  /// The first tensor's name (the only one's when not fused).
  const std::string& name() const { return *tensors.front().name; }
  /// "allreduce 'a'" or "fused allreduce of 'a', 'b', ..." for messages.
  std::string describe() const;
};

}  // namespace hvd
