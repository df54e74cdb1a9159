// Copyright horovod_cpp authors. The GPU data plane: collectives on CUDA tensors through NCCL.
//
// One NcclRunner per process set (owned by ProcessSetState, called by its Executor). It keeps
// one NCCL communicator per CUDA device, made on first use (set rank 0's unique id broadcast
// over the set's MPI data communicator), and one dedicated CUDA stream. run() enqueues a
// batch on that stream (after the producers' streams), records an event and returns; a
// finalizer thread polls the events and completes the handles, so the background thread goes
// on negotiating meanwhile. No CUDA or NCCL type appears in this header.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "backends/mpi/mpi_context.h"
#include "common/config.h"
#include "core/device_runner.h"

namespace hvd {

struct NcclRunnerOptions {
  int set_id = 0;
  int rank = 0;  ///< this rank's index in the set
  int size = 1;
  std::vector<int> global_ranks;    ///< set rank -> global rank
  MPI_Comm data_comm = MPI_COMM_NULL;  ///< the set's data communicator (not owned)
  const MpiContext* mpi = nullptr;
  Config config;
};

/// Makes the runner; touches no CUDA state until the first GPU batch arrives.
std::unique_ptr<DeviceRunner> make_nccl_runner(const NcclRunnerOptions& options);

}  // namespace hvd
