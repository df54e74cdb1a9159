// Copyright horovod_cpp authors. Public API: the option types of init() and the collectives,
// and the CUDA output allocator's type.
//
// Plain values with no behaviour, apart from the calls that take them (api.h), so that the
// library's internals can take them without the API's declarations.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "horovod_cpp/types.h"

namespace hvd {

/// A group of ranks that runs collectives among themselves, with its own communicator,
/// negotiation, response cache and stall report, independently of other sets. id 0 is the
/// global set (every rank); add_process_set() makes others.
struct ProcessSet {
  int id = 0;
};

/// Options of init(). Environment variables (docs/environment.md) are read once, by init().
struct InitOptions {
  /// Process sets to create at init, given as sorted global ranks; they get ids 1, 2, ...
  std::vector<std::vector<int>> process_sets;
  /// Fortran handle (MPI_Comm_c2f) of the communicator to run on; 0 means MPI_COMM_WORLD.
  /// Use hvd::init(MPI_Comm) from "horovod_cpp/mpi_interop.h" rather than setting this.
  long long mpi_comm_fortran = 0;
  bool use_comm = false;  ///< set when mpi_comm_fortran is meaningful
};

/// Parameters of an allreduce.
struct AllreduceOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale_factor = 1.0;   ///< multiplies the input before the reduction (floats only)
  double postscale_factor = 1.0;  ///< multiplies the result (floats only)
  ProcessSet process_set;         ///< the ranks taking part (default: all)
};

/// Parameters of a reducescatter (ops: Sum and Average).
struct ReducescatterOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
  ProcessSet process_set;
};

/// Allocates `bytes` of memory on CUDA device `device` for an output the library allocates
/// (allgather, alltoall, reducescatter on CUDA tensors). `stream` is the CUDA stream
/// (cudaStream_t as void*) the input was produced on, i.e. the caller's stream when it
/// submitted the collective (null: the legacy default stream): a stream-ordered allocator
/// should allocate for that stream, because that is where the caller will use the result. The
/// library makes its own stream wait on `stream` after allocating, so memory the allocator
/// recycles from work still queued there is not overwritten early. The returned pointer's
/// deleter frees the memory; it may run on any thread. Return null (or throw) to fail the
/// collective with an error naming the size.
using CudaAllocator = std::function<std::shared_ptr<void>(size_t bytes, int device, void* stream)>;

}  // namespace hvd
