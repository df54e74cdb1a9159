// Copyright horovod_cpp authors. The Bootstrap over an MPI communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "transport/bootstrap.h"
#include "transport/mpi/mpi_context.h"

namespace hvd {

/// A group of ranks as an MPI communicator. The exchanges are MPI collectives on it; splits
/// are new communicators (MPI_Comm_split, MPI_Comm_split_type for the host), each owned by the
/// MpiBootstrap made for it; the data plane is an MpiDataPlane on the communicator.
class MpiBootstrap : public Bootstrap {
 public:
  /// `comm`: the group (owned when `owns`, then freed in the destructor unless MPI is
  /// finalized). `mpi` provides the reduction operators of data planes; `chunk_bytes` is
  /// their reduction chunk (HOROVOD_CPP_REDUCE_CHUNK_BYTES). `name` names the group in errors.
  MpiBootstrap(const MpiContext* mpi, MPI_Comm comm, bool owns, int64_t chunk_bytes,
               std::string name);
  ~MpiBootstrap() override;
  MpiBootstrap(const MpiBootstrap&) = delete;
  MpiBootstrap& operator=(const MpiBootstrap&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  Status allgather(const void* mine, size_t bytes, void* all) override;
  Status broadcast(void* buf, size_t bytes, int root) override;
  Status barrier() override;
  Status split(int color, int key, std::unique_ptr<Bootstrap>* out) override;
  Status split_host(std::unique_ptr<Bootstrap>* out) override;
  Status make_data_plane(std::unique_ptr<DataPlane>* out) override;

 private:
  /// Wraps a split's communicator (or reports the failed call) as a group named `suffix`.
  Status adopt(int rc, const char* call, MPI_Comm comm, const char* suffix,
               std::unique_ptr<Bootstrap>* out);
  /// "<call> over <group> failed: <MPI's message>".
  Status failed(const char* call, int rc) const;

  const MpiContext* mpi_;
  MPI_Comm comm_;
  const bool owns_;
  const int64_t chunk_bytes_;
  const std::string name_;
  int rank_ = 0, size_ = 1;
};

}  // namespace hvd
