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
  /// Copies `bytes` of `buf` on `root` to every rank.
  virtual Status broadcast(void* buf, int64_t bytes, int root) = 0;
  virtual Status barrier() = 0;
};

}  // namespace hvd
