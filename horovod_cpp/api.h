// Copyright horovod_cpp authors. Public API: lifecycle, topology and collectives.
//
// Every collective takes a name. The same name must be submitted by every rank; the
// background coordinator matches submissions by name, checks that all ranks agree on the
// operation, dtype, shape and parameters, and runs the collective once every rank has
// submitted it. An empty name is replaced by "<op>.noname.<n>", n counting calls of that op on
// this rank (so unnamed calls must be made in the same order on every rank).
#pragma once

#include <string>
#include <vector>

#include "horovod_cpp/handle.h"
#include "horovod_cpp/tensor.h"
#include "horovod_cpp/types.h"

namespace hvd {

/// Options of init(). Environment variables (docs/environment.md) are read once, by init().
struct InitOptions {
  /// Fortran handle (MPI_Comm_c2f) of the communicator to run on; 0 means MPI_COMM_WORLD.
  /// Use hvd::init(MPI_Comm) from "horovod_cpp/mpi_interop.h" rather than setting this.
  long long mpi_comm_fortran = 0;
  bool use_comm = false;  ///< set when mpi_comm_fortran is meaningful
};

/// Starts horovod_cpp on this process: initializes MPI (MPI_Init_thread, asking for
/// MPI_THREAD_MULTIPLE) unless the program already did, discovers the topology and starts the
/// background coordinator thread. Collective: every rank must call it. Throws hvd::Error if
/// already initialized. MPI, when initialized here, is finalized at process exit, so init()
/// may be called again after shutdown().
void init(const InitOptions& options = {});

/// Stops the background thread. Operations still pending on any rank complete with a
/// ShutdownError ("rank R called shutdown()"); later calls throw NotInitializedError.
/// Idempotent; also run at process exit.
void shutdown();

/// True between init() and shutdown() (false once a shutdown or stall stopped the runtime).
bool is_initialized();

int rank();        ///< This process's rank in [0, size()).
int size();        ///< Number of ranks.
int local_rank();  ///< Rank among the processes on this host.
int local_size();  ///< Number of processes on this host.
int cross_rank();  ///< Index of this host among the hosts (ranks with the same local_rank).
int cross_size();  ///< Number of hosts (ranks with the same local_rank as this one).

/// Parameters of an allreduce.
struct AllreduceOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale_factor = 1.0;   ///< multiplies the input before the reduction (floats only)
  double postscale_factor = 1.0;  ///< multiplies the result (floats only)
};

/// Reduces `tensor` across ranks in place. Returns at once; the tensor must stay alive and
/// untouched until the handle completes.
Handle allreduce_async(const std::string& name, TensorView tensor,
                       const AllreduceOptions& options = {});
/// Reduces `input` across ranks into `output` (same dtype and shape); `input` is not modified.
Handle allreduce_async(const std::string& name, TensorView input, TensorView output,
                       const AllreduceOptions& options = {});
/// Blocking in-place allreduce.
void allreduce(const std::string& name, TensorView tensor, const AllreduceOptions& options = {});
/// Blocking out-of-place allreduce.
void allreduce(const std::string& name, TensorView input, TensorView output,
               const AllreduceOptions& options = {});

/// Reduces a list of tensors in place, negotiated as one unit (none starts before all are
/// ready on every rank) and fused together. One handle covers the whole group; it fails if any
/// member fails. Names must be distinct.
Handle grouped_allreduce_async(const std::vector<std::string>& names,
                               const std::vector<TensorView>& tensors,
                               const AllreduceOptions& options = {});
/// Blocking form of grouped_allreduce_async.
void grouped_allreduce(const std::vector<std::string>& names,
                       const std::vector<TensorView>& tensors,
                       const AllreduceOptions& options = {});

/// Concatenates every rank's `input` along dimension 0, in rank order. The first dimension
/// may differ across ranks; the others and the dtype must agree. The output is allocated by
/// the library: Handle::result().
Handle allgather_async(const std::string& name, TensorView input);
/// Blocking allgather; returns the concatenation.
Tensor allgather(const std::string& name, TensorView input);

/// Replaces `tensor` on every rank by its value on `root_rank` (in place).
Handle broadcast_async(const std::string& name, TensorView tensor, int root_rank);
/// Blocking broadcast.
void broadcast(const std::string& name, TensorView tensor, int root_rank);

/// Returns once every rank has called barrier().
void barrier();

/// True: this build communicates through MPI.
bool mpi_built();
/// True when built with NCCL support for CUDA tensors.
bool nccl_built();
/// True when built with CUDA support.
bool cuda_built();

}  // namespace hvd
