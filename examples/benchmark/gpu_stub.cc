// Copyright horovod_cpp authors. hvd_bench --gpu in a build without CUDA and NCCL: says so and
// ends the run with exit status 77 ("skipped"), the GPU mode being gpu_bench.cc.
#include <cstdio>

#include "benchmarks.h"

namespace bench {

int gpu_prepare(MPI_Comm comm, int* device) {
  *device = -1;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    std::fprintf(stderr,
                 "hvd_bench: --gpu: this hvd_bench was built without CUDA and NCCL (CMake found "
                 "no CUDA toolkit or no nccl.h/libnccl: HOROVOD_CPP_HAVE_CUDA or "
                 "HOROVOD_CPP_HAVE_NCCL was 0); skipped (exit 77)\n");
  }
  return 77;
}

int64_t run_gpu(const Options&, MPI_Comm, int, Json*, Json*, Json*) { return 0; }

}  // namespace bench
