// Compiles the public headers with nothing else on the include path: proof that no MPI,
// NCCL or CUDA header leaks through them.
#include "horovod_cpp/horovod_cpp.h"

#if defined(MPI_VERSION) || defined(NCCL_MAJOR)
#error "a public header pulled in MPI, NCCL or CUDA"
#endif

int hvd_public_headers_check_nvcc() { return static_cast<int>(hvd::dtype_size(hvd::DataType::kFloat16)); }
