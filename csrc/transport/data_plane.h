// Copyright horovod_cpp authors. The data plane: how bytes are moved and reduced.
//
// One interface, one implementation per transport (mpi/ now; shared memory and NCCL plug in
// here). The executor speaks only to this interface. Called from the background thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "horovod_cpp/types.h"

namespace hvd {

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  /// A short name for logs ("mpi").
  virtual const char* name() const = 0;
  /// Reduces `count` elements of `buf` in place across ranks. Average reduces as Sum (the
  /// caller divides).
  virtual Status allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) = 0;
  /// Concatenates every rank's bytes in rank order into `out` (sum of `bytes_per_rank`).
  virtual Status allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) = 0;
  /// Sends send_bytes[r] bytes (consecutive in `in`) to rank r and receives recv_bytes[r] from
  /// each rank r into `out`, in rank order.
  virtual Status alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                           const std::vector<int64_t>& recv_bytes) = 0;
  /// Reduces `in` (the concatenation of every rank's block, recv_counts[r] elements each)
  /// across ranks; this rank receives its block in `out`. Average reduces as Sum.
  virtual Status reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                               DataType dtype, ReduceOp op) = 0;
  /// Copies `bytes` of `buf` on `root` to every rank.
  virtual Status broadcast(void* buf, int64_t bytes, int root) = 0;
  virtual Status barrier() = 0;
  /// True when a failed call may leave the other ranks inside the collective (MPI: an error
  /// returned by a collective leaves the communicator in an unknown state). Such a failure is
  /// fatal: the job ends (common/fatal.h) instead of waiting for ever.
  virtual bool failures_are_fatal() const { return false; }
};

}  // namespace hvd
