// Copyright horovod_cpp authors. The Transport for host memory over any DataPlane.
//
// Everything a CPU collective needs around the wire: the fusion buffer (copy in, one
// reduction, copy out), prescale/postscale and Average, zeros for a joined rank, result
// allocation for allgather/alltoall/reducescatter, messages naming the tensors. The bytes move
// through a DataPlane: MpiDataPlane in the library (the "mpi" transport), an in-process plane
// in the unit tests. Synchronous: run() calls done before it returns.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/host/adasum.h"
#include "transport/cpu/adasum_vhdd.h"
#include "transport/data_plane.h"
#include "transport/transport.h"

namespace hvd {

/// Adasum buffers up to this size take the gathered path (one collective beats the schedule's
/// 2 log2(P) + 1 or more there; docs/training.md, "Adasum").
constexpr int64_t kAdasumGatherMaxBytes = 32 * 1024;

class CpuTransport : public Transport {
 public:
  CpuTransport(std::unique_ptr<DataPlane> plane, SetLayout layout);
  const char* name() const override { return plane_->name(); }
  /// Every collective on CPU tensors.
  bool accepts(const Batch& batch) const override { return batch.device.is_cpu(); }
  void run(Batch& batch) override;

 private:
  /// Runs the batch; a failure of a plane whose failures are fatal is reported as fatal.
  Status run_batch(Batch& b, std::vector<TensorResult>* results);
  /// One unfused collective; its errors name it and the tensor.
  Status run_one(Batch& b, std::vector<TensorResult>* results);
  Status reduce_buffer(void* buf, int64_t count, const Batch& b);
  /// reduce_buffer() for Adasum (kernels/host/adasum.h's order of combination): small buffers
  /// by adasum_gathered(), larger ones by vector-halving distance-doubling (adasum_vhdd.h).
  Status adasum_buffer(void* buf, int64_t count, const Batch& b);
  /// Every rank's buffer gathered to every rank, then the same tree run by each, so that all
  /// end with the same bytes: one collective, set size x buffer of traffic and memory.
  Status adasum_gathered(void* buf, int64_t bytes, DataType dtype);
  Status allreduce_one(Batch& b);
  Status allreduce_fused(Batch& b);
  Status allgather(const Batch& b, TensorResult* out);
  Status alltoall(const Batch& b, TensorResult* out);
  Status reducescatter(const Batch& b, TensorResult* out);
  unsigned char* scratch(int64_t bytes);

  std::unique_ptr<DataPlane> plane_;
  const SetLayout layout_;
  const std::string prefix_;  // timeline phases: "MPI_"
  std::vector<unsigned char> fusion_buffer_;
  std::vector<unsigned char> scratch_;
  std::vector<unsigned char> adasum_slots_;  // Adasum: every rank's buffer, in rank order
  std::vector<int64_t> adasum_bytes_;        // Adasum: the gather's bytes per rank
  std::vector<AdasumSegment> adasum_segments_;
  AdasumVhdd adasum_vhdd_;
};

}  // namespace hvd
