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
