// Compiles the public headers with nothing else on the include path: proof that no MPI,
// NCCL or CUDA header leaks through them. options.h comes first: the internals include it
// alone, so it must stand alone.
#include "horovod_cpp/options.h"
#include "horovod_cpp/horovod_cpp.h"

#if defined(MPI_VERSION) || defined(NCCL_MAJOR)
#error "a public header pulled in MPI, NCCL or CUDA"
#endif

int hvd_public_headers_check_nvcc() {
  const hvd::InitOptions options;
  return static_cast<int>(hvd::dtype_size(hvd::DataType::kFloat16)) + options.use_comm;
}
