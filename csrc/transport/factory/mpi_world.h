// Copyright horovod_cpp authors. The World over MPI: the factory of every process set's
// control plane (MpiControlPlane on a communicator of its own) and transports (the list in
// transports.cc, on a data communicator of its own). transport/factory is the top floor of
// transport/: it alone names every transport folder.
#pragma once

#include "transport/mpi/mpi_context.h"
#include "transport/world.h"

namespace hvd {

class MpiWorld : public World {
 public:
  /// Initializes MPI if needed (see MpiContext::init).
  Status init(const InitOptions& options);
  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  int local_rank() const override { return mpi_.local_rank(); }
  int local_size() const override { return mpi_.local_size(); }
  int cross_rank() const override { return mpi_.cross_rank(); }
  int cross_size() const override { return mpi_.cross_size(); }
  Status allgather(const std::vector<int64_t>& mine, std::vector<int64_t>* all) override;
  Status broadcast(std::vector<int>* values, int count) override;
  Status make_set(int id, const std::vector<int>& ranks, const Config& config,
                  std::unique_ptr<SetPlanes>* out) override;

 private:
  MpiContext mpi_;
};

}  // namespace hvd
