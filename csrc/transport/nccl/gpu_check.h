// Copyright horovod_cpp authors. Checks of CUDA and NCCL return codes (transport/nccl only).
//
// Each macro returns a Backend status from the enclosing function when the call fails. The
// message names the call, the context (`ctx`: the operation, its tensors and this rank), and
// the library's own description of the error.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "common/status.h"

namespace hvd {

inline std::string cuda_error_message(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

inline std::string nccl_error_message(ncclResult_t r, ncclComm_t comm) {
  std::string m = std::string(ncclGetErrorString(r));
  const char* last = ncclGetLastError(comm);
  if (last && *last) m += " (" + std::string(last) + ")";
  return m;
}

}  // namespace hvd

/// A failed CUDA call: clears the thread's last-error state (so a later, unrelated call does
/// not report this error again) and returns a Backend status.
#define HVD_CUDA_CHECK(call, ctx)                                                           \
  do {                                                                                      \
    cudaError_t _hvd_ce = (call);                                                           \
    if (_hvd_ce != cudaSuccess) {                                                           \
      (void)cudaGetLastError();                                                             \
      return ::hvd::Status::Backend(std::string(#call) + " failed at " __FILE__ ":" +       \
                                    std::to_string(__LINE__) + " (" + (ctx) +              \
                                    "): " + ::hvd::cuda_error_message(_hvd_ce));            \
    }                                                                                       \
  } while (0)

/// A failed NCCL call. ncclInProgress is not a failure: the communicators are non-blocking,
/// and the caller waits for the operation to settle (NcclTransport::settle).
#define HVD_NCCL_CHECK(call, comm, ctx)                                                     \
  do {                                                                                      \
    ncclResult_t _hvd_nr = (call);                                                          \
    if (_hvd_nr != ncclSuccess && _hvd_nr != ncclInProgress) {                              \
      return ::hvd::Status::Backend(std::string(#call) + " failed at " __FILE__ ":" +       \
                                    std::to_string(__LINE__) + " (" + (ctx) +              \
                                    "): " + ::hvd::nccl_error_message(_hvd_nr, (comm)));    \
    }                                                                                       \
  } while (0)
