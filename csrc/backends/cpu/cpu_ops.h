// Copyright horovod_cpp authors. Element-wise kernels on host memory, independent of MPI:
// reductions of every dtype (half types accumulate in float), scaling, integer averaging.
#pragma once

#include <cstdint>

#include "horovod_cpp/types.h"

namespace hvd {

/// inout[i] = op(inout[i], in[i]) for n elements. Average reduces like Sum.
void reduce_into(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op);

/// out[i] = op(a[i], b[i]) for n elements: one pass where a copy and reduce_into take two.
/// `out` may be `a`; `b` must not overlap `out`.
void reduce_to(void* out, const void* a, const void* b, int64_t n, DataType dtype, ReduceOp op);

/// out[i] = op(a[i], b[i]) * factor for float32 and float64 (the factor rounded to float for
/// float32), bit for bit what reduce_to() then scale_buffer() give, in one pass. Returns false,
/// doing nothing, for other dtypes. Aliasing as reduce_to().
bool reduce_scaled_to(void* out, const void* a, const void* b, int64_t n, DataType dtype,
                      ReduceOp op, double factor);

/// data[i] *= factor: float32 and the half types in float, float64 in double, integers in
/// double truncated toward zero (Horovod's rule for pre/postscale on integer tensors). Bool
/// tensors are left alone (they take no scale factors).
void scale_buffer(void* data, int64_t n, DataType dtype, double factor);

/// data[i] /= divisor for an integer dtype, truncating toward zero.
void divide_integers(void* data, int64_t n, DataType dtype, int64_t divisor);

}  // namespace hvd
