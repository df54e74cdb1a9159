// Copyright horovod_cpp authors. The two parts of hvd_bench: the nccl-tests style size sweep
// and the training-like workloads. Both run on every rank; rank 0 prints and fills the JSON.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "bench_util.h"

namespace bench {

/// The size sweep over opts.ops. Returns the number of wrong elements summed over ranks.
int64_t run_sweep(const Options& opts, MPI_Comm comm, Json* out);

/// Workloads a, c, d of shared/bench/README.md, each beside its raw-MPI baselines, then the
/// issue's targets. Returns the number of wrong elements summed over ranks.
int64_t run_workloads(const Options& opts, MPI_Comm comm, Json* out, Json* targets);

/// GPU mode (--gpu): gpu_bench.cc, or gpu_stub.cc in builds without CUDA and NCCL.
/// Before hvd::init, collective over `comm`: chooses this rank's CUDA device
/// (HOROVOD_CPP_CUDA_DEVICE, else local rank % device count) and makes it current. Returns -1
/// to go on, with *device set, or the exit status every rank must end with (77: no CUDA and
/// NCCL in this build or no usable device on some rank; 2: more ranks than GPUs on a host
/// without GPU sharing), rank 0 having said why.
int gpu_prepare(MPI_Comm comm, int* device);

/// After hvd::init: prints the GPU header, makes a raw NCCL communicator of its own, runs the
/// sweep and the GPU workloads (lat, many, big) on CUDA tensors of `device`, and adds the GPU's
/// fields to `meta`. Returns the wrong elements (ours and raw NCCL) summed over ranks.
int64_t run_gpu(const Options& opts, MPI_Comm comm, int device, Json* meta, Json* sweep,
                Json* workloads);

/// Iterations for one size when the user gave none (as bench_mpi_baseline.py does).
inline void auto_iters(int64_t bytes, int* warmup, int* iters) {
  if (bytes <= (256 << 10)) {
    *warmup = 20, *iters = 200;
  } else if (bytes <= (4 << 20)) {
    *warmup = 5, *iters = 50;
  } else {
    *warmup = 3, *iters = 20;
  }
}

}  // namespace bench
