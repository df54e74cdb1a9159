// Copyright horovod_cpp authors. The DataPlane over MPI (CPU tensors).
#pragma once

#include "transport/data_plane.h"
#include "transport/mpi/mpi_context.h"

namespace hvd {

/// Blocking MPI collectives on the data communicator. Reductions larger than `chunk_bytes`
/// are issued piece by piece, which keeps each piece's working set in cache (one call on a
/// 97 MB buffer is far slower here than the same bytes in cache-sized calls).
class MpiDataPlane : public DataPlane {
 public:
  /// `comm` (owned by the caller) carries the data; `ctx` provides the reduction operators.
  MpiDataPlane(const MpiContext* ctx, MPI_Comm comm, int64_t chunk_bytes);
  const char* name() const override { return "mpi"; }
  bool failures_are_fatal() const override { return true; }
  Status allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  Status allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) override;
  Status alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                   const std::vector<int64_t>& recv_bytes) override;
  Status reducescatter(const void* in, void* out, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  Status broadcast(void* buf, int64_t bytes, int root) override;
  Status barrier() override;

 private:
  const MpiContext* ctx_;
  MPI_Comm comm_;
  int rank_ = 0;
  int64_t chunk_bytes_;
};

}  // namespace hvd
