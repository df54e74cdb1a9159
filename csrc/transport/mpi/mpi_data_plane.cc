// Copyright horovod_cpp authors.
#include "transport/mpi/mpi_data_plane.h"

#include <algorithm>

namespace hvd {
namespace {

// Byte counts and displacements as MPI's ints; false when they do not fit.
bool to_int_counts(const std::vector<int64_t>& bytes, std::vector<int>* counts,
                   std::vector<int>* displs) {
  counts->resize(bytes.size());
  displs->resize(bytes.size());
  int64_t total = 0;
  for (size_t r = 0; r < bytes.size(); ++r) {
    if (total + bytes[r] > 0x7fffffffLL) return false;
    (*counts)[r] = static_cast<int>(bytes[r]);
    (*displs)[r] = static_cast<int>(total);
    total += bytes[r];
  }
  return true;
}

}  // namespace

MpiDataPlane::MpiDataPlane(const MpiContext* ctx, MPI_Comm comm, int64_t chunk_bytes)
    : ctx_(ctx), comm_(comm), chunk_bytes_(chunk_bytes) {
  MPI_Comm_rank(comm_, &rank_);
}

Status MpiDataPlane::alltoallv(const void* in, const std::vector<int64_t>& send_bytes, void* out,
                               const std::vector<int64_t>& recv_bytes) {
  std::vector<int> sc, sd, rc, rd;
  if (!to_int_counts(send_bytes, &sc, &sd) || !to_int_counts(recv_bytes, &rc, &rd)) {
    return Status::InvalidArgument("alltoall of more than 2 GiB is not supported by the MPI path");
  }
  HVD_MPI_CHECK(MPI_Alltoallv(in, sc.data(), sd.data(), MPI_BYTE, out, rc.data(), rd.data(),
                              MPI_BYTE, comm_));
  return Status::OK();
}

Status MpiDataPlane::reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                                   DataType dtype, ReduceOp op) {
  std::vector<int> c(counts.size());
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    total += counts[r];
    c[r] = static_cast<int>(counts[r]);
  }
  if (total > 0x7fffffffLL) {
    return Status::InvalidArgument("reducescatter of more than 2^31 elements is not supported");
  }
  // Equal blocks (the usual case) take MPI_Reduce_scatter_block, whose algorithms Open MPI
  // tunes separately (and better) than those of the general call.
  if (std::all_of(c.begin(), c.end(), [&](int k) { return k == c.front(); })) {
    HVD_MPI_CHECK(MPI_Reduce_scatter_block(in, out, c.empty() ? 0 : c.front(),
                                           MpiContext::datatype(dtype), ctx_->op(dtype, op),
                                           comm_));
    return Status::OK();
  }
  HVD_MPI_CHECK(MPI_Reduce_scatter(in, out, c.data(), MpiContext::datatype(dtype),
                                   ctx_->op(dtype, op), comm_));
  return Status::OK();
}

Status MpiDataPlane::allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(chunk_bytes_ / esize, 1 << 30));
  MPI_Datatype type = MpiContext::datatype(dtype);
  MPI_Op mop = ctx_->op(dtype, op);
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < count; done += chunk) {
    const int n = static_cast<int>(std::min(chunk, count - done));
    HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + done * esize, n, type, mop, comm_));
  }
  return Status::OK();
}

Status MpiDataPlane::allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes) {
  std::vector<int> counts, displs;
  if (!to_int_counts(bytes, &counts, &displs)) {
    return Status::InvalidArgument("allgather output over 2 GiB is not supported by the MPI path");
  }
  const int me = rank_;
  HVD_MPI_CHECK(MPI_Allgatherv(in, counts[static_cast<size_t>(me)], MPI_BYTE, out, counts.data(),
                               displs.data(), MPI_BYTE, comm_));
  return Status::OK();
}

Status MpiDataPlane::broadcast(void* buf, int64_t bytes, int root) {
  constexpr int64_t kMax = 1 << 30;
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < bytes; done += kMax) {
    const int n = static_cast<int>(std::min(kMax, bytes - done));
    HVD_MPI_CHECK(MPI_Bcast(p + done, n, MPI_BYTE, root, comm_));
  }
  return Status::OK();
}

Status MpiDataPlane::barrier() {
  HVD_MPI_CHECK(MPI_Barrier(comm_));
  return Status::OK();
}

}  // namespace hvd
