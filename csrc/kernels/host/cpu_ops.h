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

/// Finishes reduced elements in place: floating types are multiplied by `scale` (the
/// Average's 1/n times a postscale), integers by `scale` only when it is not 1 and otherwise
/// divided by `divisor` (an integer Average), bool left alone.
void finish_reduction(void* data, int64_t n, DataType dtype, double scale, int64_t divisor);

/// acc = ((a op b) op x(2)) ... op x(ranks - 1) over n elements, in that order (so a value
/// does not depend on which rank folds it), then finished as finish_reduction() does. For
/// float32/float64 with a scale the last reduction and the scaling are one pass
/// (reduce_scaled_to(), the same bits). x(j) gives the j-th operand for j >= 2; `acc` may be
/// `a`.
template <typename X>
void fold_reduction(void* acc, const void* a, const void* b, X x, int ranks, int64_t n,
                    DataType dtype, ReduceOp op, double scale, int64_t divisor) {
  const bool fused = scale != 1.0 && (dtype == DataType::kFloat32 || dtype == DataType::kFloat64);
  const int last = fused ? ranks - 1 : ranks;  // the operand the fused pass takes, if any
  if (fused && ranks == 2) {
    reduce_scaled_to(acc, a, b, n, dtype, op, scale);
    return;
  }
  reduce_to(acc, a, b, n, dtype, op);
  for (int j = 2; j < last; ++j) reduce_into(acc, x(j), n, dtype, op);
  if (fused) {
    reduce_scaled_to(acc, acc, x(last), n, dtype, op, scale);
  } else {
    finish_reduction(acc, n, dtype, scale, divisor);
  }
}

}  // namespace hvd
