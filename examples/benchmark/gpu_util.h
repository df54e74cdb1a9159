// Copyright horovod_cpp authors. What the GPU mode of hvd_bench shares (gpu_bench.cc,
// gpu_sweep.cc, gpu_workloads.cc): checked CUDA and NCCL calls, device buffers, copies to and
// from the host, and the benchmark's GPU (device, stream, raw NCCL communicator). Compiled only
// in builds with CUDA and NCCL.
//
// Timing rule of the GPU mode: each timed step runs from the call to the moment its result is
// usable on the host. Ours: the collective on CUDA tensors produced on the benchmark's stream,
// then Handle::wait()/result() (a handle completes once the GPU has finished). Raw NCCL: the
// NCCL call(s) on the benchmark's stream, then cudaStreamSynchronize.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "horovod_cpp/horovod_cpp.h"
#include "sweep.h"

#ifndef NCCL_VERSION
#define NCCL_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#endif

namespace bench {

/// Throw std::runtime_error naming the call, the rank, where, and CUDA's / NCCL's description.
void cuda_check(cudaError_t e, const char* call, const char* file, int line);
void nccl_check(ncclResult_t r, const char* call, const char* file, int line);
#define BENCH_CUDA(call) ::bench::cuda_check((call), #call, __FILE__, __LINE__)
#define BENCH_NCCL(call) ::bench::nccl_check((call), #call, __FILE__, __LINE__)

/// `n` floats of device memory on the current device, freed (cudaFree) with the last copy.
using DevBuf = std::shared_ptr<float>;
DevBuf device_alloc(int64_t n);

/// Host buffers of the checks, kept between checks (a 1 GiB buffer is not faulted in anew for
/// every collective of every size).
struct HostScratch {
  std::vector<float> in, out;
};

/// The benchmark's GPU, made and released by run_gpu(); cheap to copy (handles only).
struct Gpu {
  int device = -1;
  int rank = 0, n = 1;
  cudaStream_t stream = nullptr;  ///< non-blocking; every benchmark copy and raw NCCL call
  ncclComm_t nccl = nullptr;      ///< the raw baseline's communicator (not the library's)
  MPI_Comm comm = MPI_COMM_NULL;  ///< timing barriers and sums of wrong elements
  bool corrupt = false;           ///< --debug-corrupt: damage our results on rank 0

  /// A float32 CUDA tensor of `count` elements at `p`, produced on `stream`.
  hvd::TensorView view(float* p, int64_t count) const;
  /// Waits for everything queued on `stream`.
  void sync() const;
  /// A host buffer of `count` floats to fill with an input (contents undefined).
  float* host_input(int64_t count) const;
  /// Copies `count` floats of host_input() to `dst` through `stream` and waits for the copy.
  void upload(float* dst, int64_t count) const;
  /// Copies `count` floats from `src` (device or host) to a host buffer through `stream`, waits
  /// for the copy and returns the buffer (valid until the next download).
  float* download(const void* src, int64_t count) const;
  /// --debug-corrupt: damages one element of a result of ours (host copy) on rank 0.
  void damage(float* host) const {
    if (corrupt && rank == 0) host[0] += 1.0f;
  }

  std::shared_ptr<HostScratch> scratch = std::make_shared<HostScratch>();
};

/// The sweep's baseline: raw NCCL on device buffers of `gpu` (gpu_sweep.cc).
SweepBaseline nccl_baseline(const Gpu& gpu);

/// The GPU workloads (opts.workloads: lat, many, big; gpu_workloads.cc). Returns the wrong
/// elements, ours and raw NCCL, summed over ranks.
int64_t run_gpu_workloads(const Options& opts, const Gpu& gpu, Json* out);

}  // namespace bench
