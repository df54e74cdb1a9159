// Copyright horovod_cpp authors. The ControlPlane over an MPI communicator.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "transport/control_plane.h"

namespace hvd {

/// Non-blocking MPI collectives completed with mpi_wait, on a communicator used for nothing
/// else (so control messages never interleave with data).
class MpiControlPlane : public ControlPlane {
 public:
  /// `yield_core`: see mpi_wait().
  MpiControlPlane(MPI_Comm comm, int rank, int size, bool yield_core)
      : comm_(comm), rank_(rank), size_(size), yield_core_(yield_core) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allreduce_and(std::vector<uint64_t>* words) override;
  Status gather(const std::string& mine, std::vector<std::string>* all) override;
  Status broadcast(std::string* blob) override;

 private:
  MPI_Comm comm_;
  int rank_, size_;
  bool yield_core_;
  static constexpr int kAndTag = 0x4876;  // the bit-vector exchange's point-to-point messages
  std::vector<uint64_t> peer_words_;      // what the current partner sent
};

}  // namespace hvd
