// Copyright horovod_cpp authors. CUDA kernels of the GPU data plane, behind plain host
// functions: no CUDA type appears here, so any translation unit may include this header.
//
// Every function enqueues work on `stream` (a cudaStream_t passed as void*) and returns at
// once, without synchronizing. The return value is a cudaError_t as int (0 = cudaSuccess); the
// caller turns it into a message with cuda_error_text().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "horovod_cpp/types.h"

namespace hvd {
namespace cuda {

/// One piece of a batched copy: `count` elements from `src` to `dst` (both device memory of the
/// current device; they may be equal for an in-place scale, but must not overlap otherwise).
struct CopyItem {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t count = 0;
};

/// dst[i] = src[i] * scale for every item, in one launch per group of up to kMaxItemsPerLaunch
/// items. Floating types are scaled (float16 and bfloat16 through float, float64 in double);
/// for other types `scale` must be 1 and this is a plain copy. Used for the fusion buffer's
/// copy-in (with the prescale factor) and copy-out (with the postscale factor).
int batched_copy_scale(const CopyItem* items, size_t n, DataType dtype, double scale,
                       void* stream);

/// The most items one kernel launch carries (they travel as a kernel parameter).
constexpr size_t kMaxItemsPerLaunch = 32;

/// buf[i] *= scale in place (floating types only).
int scale_in_place(void* buf, int64_t count, DataType dtype, double scale, void* stream);

/// buf[i] /= divisor for integer types, truncated toward zero (Average of integer tensors, as on
/// the CPU). Bool and floating types are rejected with cudaErrorInvalidValue.
int divide_integers(void* buf, int64_t count, DataType dtype, int divisor, void* stream);

/// "cudaErrorMemoryAllocation: out of memory" for a cudaError_t given as int.
std::string cuda_error_text(int code);

}  // namespace cuda
}  // namespace hvd
