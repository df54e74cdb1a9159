// Copyright horovod_cpp authors.
#include "transport/mpi/mpi_bootstrap.h"

#include <climits>

#include "transport/mpi/mpi_data_plane.h"

namespace hvd {

MpiBootstrap::MpiBootstrap(const MpiContext* mpi, MPI_Comm comm, bool owns, int64_t chunk_bytes,
                           std::string name)
    : mpi_(mpi), comm_(comm), owns_(owns), chunk_bytes_(chunk_bytes), name_(std::move(name)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiBootstrap::~MpiBootstrap() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status MpiBootstrap::failed(const char* call, int rc) const {
  return Status::Backend(std::string(call) + " over " + name_ + " failed: " + mpi_error_string(rc));
}

Status MpiBootstrap::allgather(const void* mine, size_t bytes, void* all) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return Status::InvalidArgument("bootstrap allgather over " + name_ + ": " +
                                   std::to_string(bytes) + " bytes per rank (at most 2 GiB)");
  }
  const int n = static_cast<int>(bytes);
  const int rc = MPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, comm_);
  return rc == MPI_SUCCESS ? Status::OK() : failed("MPI_Allgather", rc);
}

Status MpiBootstrap::broadcast(void* buf, size_t bytes, int root) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return Status::InvalidArgument("bootstrap broadcast over " + name_ + ": " +
                                   std::to_string(bytes) + " bytes (at most 2 GiB)");
  }
  const int rc = MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, comm_);
  return rc == MPI_SUCCESS ? Status::OK() : failed("MPI_Bcast", rc);
}

Status MpiBootstrap::barrier() {
  const int rc = MPI_Barrier(comm_);
  return rc == MPI_SUCCESS ? Status::OK() : failed("MPI_Barrier", rc);
}

Status MpiBootstrap::adopt(int rc, const char* call, MPI_Comm comm, const char* suffix,
                           std::unique_ptr<Bootstrap>* out) {
  if (rc != MPI_SUCCESS) return failed(call, rc);
  *out = std::make_unique<MpiBootstrap>(mpi_, comm, true, chunk_bytes_, name_ + " / " + suffix);
  return Status::OK();
}

Status MpiBootstrap::split(int color, int key, std::unique_ptr<Bootstrap>* out) {
  MPI_Comm sub = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(comm_, color, key, &sub);
  return adopt(rc, "MPI_Comm_split", sub, ("split " + std::to_string(color)).c_str(), out);
}

Status MpiBootstrap::split_host(std::unique_ptr<Bootstrap>* out) {
  MPI_Comm sub = MPI_COMM_NULL;
  const int rc = MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &sub);
  return adopt(rc, "MPI_Comm_split_type", sub, "host", out);
}

Status MpiBootstrap::make_data_plane(std::unique_ptr<DataPlane>* out) {
  *out = std::make_unique<MpiDataPlane>(mpi_, comm_, chunk_bytes_);
  return Status::OK();
}

}  // namespace hvd
