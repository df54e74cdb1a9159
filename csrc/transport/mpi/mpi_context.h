// Copyright horovod_cpp authors. MPI setup: initialization, communicators, topology, and the
// reduction operators MPI lacks (float16, bfloat16).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "horovod_cpp/types.h"

namespace hvd {

/// Text of an MPI error code, for messages.
std::string mpi_error_string(int code);

/// Wraps an MPI call: returns a Backend status naming the call, where it was made
/// (file:line) and MPI's message on failure.
#define HVD_MPI_CHECK(call)                                                                \
  do {                                                                                     \
    int _hvd_rc = (call);                                                                  \
    if (_hvd_rc != MPI_SUCCESS) {                                                          \
      return ::hvd::Status::Backend(std::string(#call) + " failed at " __FILE__ ":" +      \
                                    std::to_string(__LINE__) + ": " +                      \
                                    ::hvd::mpi_error_string(_hvd_rc));                     \
    }                                                                                      \
  } while (0)

class MpiContext {
 public:
  MpiContext() = default;
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  /// Initializes MPI if needed, duplicates `base` (MPI_COMM_WORLD when use_base is false) and
  /// discovers the topology.
  Status init(bool use_base, MPI_Fint base);
  /// Frees the communicators and operators (MPI stays initialized until process exit).
  void release();

  /// The job's communicator (a duplicate of the base), used for setup exchanges only.
  MPI_Comm base_comm() const { return base_comm_; }
  /// Collective over base_comm(): makes a data and a control communicator for the ranks in
  /// `ranks` (sorted), or MPI_COMM_NULL for ranks not in it.
  Status make_comms(const std::vector<int>& ranks, MPI_Comm* data, MPI_Comm* control) const;
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  /// True when this host's ranks outnumber the cores they may run on (the union of their CPU
  /// affinity masks): a waiting rank then yields its core between polls, or the peer it waits
  /// for could not run. Otherwise waits spin without yielding, since each yield hands the core
  /// to whatever thread is runnable, mid-collective.
  bool cores_shared() const { return cores_shared_; }

  /// The MPI datatype carrying `dtype` (half types as 16-bit words).
  static MPI_Datatype datatype(DataType dtype);
  /// The MPI operator reducing `dtype` with `op` (custom ones for half types and bool).
  MPI_Op op(DataType dtype, ReduceOp op) const;

 private:
  MPI_Comm base_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, cross_rank_ = 0, cross_size_ = 1;
  Status find_cores_shared(MPI_Comm local);

  MPI_Op half_ops_[2][5] = {};  // [fp16, bf16][ReduceOp]
  MPI_Op wrap_sum_ops_[4] = {};  // int8, uint8, int16, uint16 sums that wrap (mpi_context.cc)
  bool ops_created_ = false;
  bool cores_shared_ = true;
};

}  // namespace hvd
