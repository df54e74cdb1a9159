// Copyright horovod_cpp authors. Public API: lifecycle, topology and collectives.
//
// Every collective takes a name. The same name must be submitted by every rank; the
// background coordinator matches submissions by name, checks that all ranks agree on the
// operation, dtype, shape and parameters, and runs the collective once every rank has
// submitted it. An empty name is replaced by "<op>.noname.<n>", n counting calls of that op on
// this rank (so unnamed calls must be made in the same order on every rank). The option types
// are in options.h.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "horovod_cpp/handle.h"
#include "horovod_cpp/options.h"
#include "horovod_cpp/tensor.h"
#include "horovod_cpp/types.h"

namespace hvd {

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

/// Adds a process set of the given global ranks. Collective: every rank (members or not)
/// calls it with the same ranks, in the same order relative to other add/remove calls.
/// Throws InvalidArgumentError (on every rank) for an empty list, ranks out of range,
/// duplicates, or lists that differ across ranks.
ProcessSet add_process_set(const std::vector<int>& ranks);
/// Removes a process set. Collective like add_process_set(); operations still pending in the
/// set fail with a ShutdownError. The global set cannot be removed.
void remove_process_set(ProcessSet set);
/// The global ranks of `set`, sorted. Throws InvalidArgumentError for an unknown set.
std::vector<int> process_set_ranks(ProcessSet set);
/// This rank's index within `set`, or -1 if it is not a member.
int process_set_rank(ProcessSet set);
/// The number of ranks of `set`.
int process_set_size(ProcessSet set);

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
Handle allgather_async(const std::string& name, TensorView input, ProcessSet set = {});
/// Blocking allgather; returns the concatenation.
Tensor allgather(const std::string& name, TensorView input, ProcessSet set = {});
/// Gathers a list of tensors as one unit; Handle::results() has one tensor per input.
Handle grouped_allgather_async(const std::vector<std::string>& names,
                               const std::vector<TensorView>& inputs, ProcessSet set = {});

/// Replaces `tensor` on every rank by its value on `root_rank` (a global rank, which must be a
/// member of `set`), in place.
Handle broadcast_async(const std::string& name, TensorView tensor, int root_rank,
                       ProcessSet set = {});
/// Blocking broadcast.
void broadcast(const std::string& name, TensorView tensor, int root_rank, ProcessSet set = {});

/// Sends slices of dimension 0 of `input` to every rank: splits[r] rows to rank r, in order
/// (empty splits: an even split, which needs dimension 0 divisible by the number of ranks).
/// The output, allocated by the library, concatenates what every rank sent this rank, in rank
/// order (Handle::result()); Handle::received_splits() gives the rows from each rank.
Handle alltoall_async(const std::string& name, TensorView input,
                      const std::vector<int64_t>& splits = {}, ProcessSet set = {});
/// The result of a blocking alltoall.
struct AlltoallResult {
  Tensor output;
  std::vector<int64_t> received_splits;
};
/// Blocking alltoall.
AlltoallResult alltoall(const std::string& name, TensorView input,
                        const std::vector<int64_t>& splits = {}, ProcessSet set = {});

/// Reduces `input` across ranks; each rank receives its slice of dimension 0 of the result
/// (the first dim0 % size ranks get one row more). Output allocated by the library.
Handle reducescatter_async(const std::string& name, TensorView input,
                           const ReducescatterOptions& options = {});
/// Blocking reducescatter.
Tensor reducescatter(const std::string& name, TensorView input,
                     const ReducescatterOptions& options = {});
/// Reduce-scatters a list of tensors as one unit; Handle::results() has one per input.
Handle grouped_reducescatter_async(const std::vector<std::string>& names,
                                   const std::vector<TensorView>& inputs,
                                   const ReducescatterOptions& options = {});

/// For ranks with uneven amounts of data: this rank has no more steps. Until every rank has
/// joined, it takes part in every other rank's allreduces with zeros (Average still divides
/// by the full size); any other collective issued meanwhile fails on every rank. Returns the
/// last rank to join, the same on every rank. Global set only.
int join();

/// Returns once every rank of `set` has called barrier().
void barrier(ProcessSet set = {});

/// Starts writing a Chrome-trace timeline to `path` (rank 0 writes; other ranks ignore it),
/// like HOROVOD_TIMELINE. `mark_cycles` adds a marker per coordination cycle.
void start_timeline(const std::string& path, bool mark_cycles = false);
/// Stops the timeline, leaving a complete JSON file.
void stop_timeline();

/// Installs `allocator` for the CUDA outputs of every later collective (for instance a
/// framework's caching allocator: the LibTorch adapter installs LibTorch's when it is first
/// used with CUDA tensors). An empty function restores the default: a stream-ordered CUDA
/// memory pool of the library (cudaMallocFromPoolAsync / cudaFreeAsync on `stream`), which
/// keeps freed memory for the next outputs.
/// May be called before init() and at any time; collectives already running keep the
/// allocator they started with.
void set_cuda_allocator(CudaAllocator allocator);

/// True: this build communicates through MPI.
bool mpi_built();
/// True when built with NCCL support for CUDA tensors.
bool nccl_built();
/// True when built with CUDA support.
bool cuda_built();
/// True when built with the Gloo controller (HOROVOD_GLOO=1 jobs, without MPI).
bool gloo_built();
/// True while this process runs a job on the Gloo controller (between init() and shutdown()).
bool gloo_enabled();

}  // namespace hvd
