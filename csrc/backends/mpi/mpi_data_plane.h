// Copyright horovod_cpp authors. The DataPlane over MPI (CPU tensors).
#pragma once

#include "backends/data_plane.h"
#include "backends/mpi/mpi_context.h"

namespace hvd {

/// Blocking MPI collectives on the data communicator. Reductions larger than `chunk_bytes`
/// are issued piece by piece, which keeps each piece's working set in cache (one call on a
/// 97 MB buffer is far slower here than the same bytes in cache-sized calls).
class MpiDataPlane : public DataPlane {
 public:
  MpiDataPlane(const MpiContext* ctx, int64_t chunk_bytes) : ctx_(ctx), chunk_bytes_(chunk_bytes) {}
  const char* name() const override { return "mpi"; }
  Status allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  Status allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status broadcast(void* buf, int64_t bytes, int root) override;
  Status barrier() override;

 private:
  const MpiContext* ctx_;
  int64_t chunk_bytes_;
};

}  // namespace hvd
