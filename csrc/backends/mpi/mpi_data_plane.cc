// Copyright horovod_cpp authors.
#include "backends/mpi/mpi_data_plane.h"

#include <algorithm>

namespace hvd {

Status MpiDataPlane::allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(chunk_bytes_ / esize, 1 << 30));
  MPI_Datatype type = MpiContext::datatype(dtype);
  MPI_Op mop = ctx_->op(dtype, op);
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < count; done += chunk) {
    const int n = static_cast<int>(std::min(chunk, count - done));
    HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + done * esize, n, type, mop, ctx_->data_comm()));
  }
  return Status::OK();
}

Status MpiDataPlane::allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes) {
  std::vector<int> counts(bytes.size()), displs(bytes.size());
  int64_t total = 0;
  for (size_t r = 0; r < bytes.size(); ++r) {
    if (total + bytes[r] > 0x7fffffffLL) {
      return Status::InvalidArgument("allgather output over 2 GiB is not supported by the MPI path");
    }
    counts[r] = static_cast<int>(bytes[r]);
    displs[r] = static_cast<int>(total);
    total += bytes[r];
  }
  const int me = ctx_->rank();
  HVD_MPI_CHECK(MPI_Allgatherv(in, counts[static_cast<size_t>(me)], MPI_BYTE, out, counts.data(),
                               displs.data(), MPI_BYTE, ctx_->data_comm()));
  return Status::OK();
}

Status MpiDataPlane::broadcast(void* buf, int64_t bytes, int root) {
  constexpr int64_t kMax = 1 << 30;
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < bytes; done += kMax) {
    const int n = static_cast<int>(std::min(kMax, bytes - done));
    HVD_MPI_CHECK(MPI_Bcast(p + done, n, MPI_BYTE, root, ctx_->data_comm()));
  }
  return Status::OK();
}

Status MpiDataPlane::barrier() {
  HVD_MPI_CHECK(MPI_Barrier(ctx_->data_comm()));
  return Status::OK();
}

}  // namespace hvd
