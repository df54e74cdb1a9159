// Copyright horovod_cpp authors. Adasum (adaptive summation) of host vectors.
//
// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021)
// combines two gradients a and b as
//     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// which is a + b for orthogonal vectors and their average for parallel ones. The order in which
// a set of n ranks is combined (docs/training.md, "Adasum"): with P the largest power of two
// <= n, rank P + j first folds into rank j (j < n - P); then the P vectors meet in the binary
// tree of vector-halving distance-doubling: at distance d = 1, 2, ..., P/2 the vector of ranks
// [i, i + d) meets that of [i + d, i + 2d) for every multiple i of 2d.
//
// The pieces here serve both ways of running that order: the whole tree on gathered buffers
// (adasum_tree) and the distributed schedule (transport/cpu/adasum_vhdd.h), which sums a pair's
// dot product and norms over pieces (adasum_partials) before it combines each piece
// (adasum_blend). Every tensor of a fused buffer is its own vector (its own dot product and
// norms). Dot products and norms accumulate in double; each combined element is computed in
// double and rounded once to the tensor's type (half types: through float's range).
#pragma once

#include <cstdint>

#include "horovod_cpp/types.h"

namespace hvd {

/// One tensor of a buffer: its first element's byte offset and its element count.
struct AdasumSegment {
  int64_t offset = 0;
  int64_t count = 0;
};

/// The largest power of two not above `ranks` (>= 1): the ranks the tree runs over after the
/// fold.
int adasum_power_of_two(int ranks);

/// Combines `ranks` vectors laid out one after another in `slots` (rank r's at
/// r * slot_bytes) in the order above, each of the `n_segments` segments separately; the
/// result is left in slot 0 (the other slots are overwritten). `dtype` must be a floating
/// type (submission refuses the others).
void adasum_tree(void* slots, int ranks, int64_t slot_bytes, const AdasumSegment* segments,
                 int64_t n_segments, DataType dtype);

/// Combines `a` and `b` (`count` elements of `dtype`) into `a`: one step of the tree.
void adasum_pair(void* a, const void* b, int64_t count, DataType dtype);

/// The coefficient of a vector with squared norm `norm2` in a pair with dot product `dot`:
/// 1 - dot / (2 norm2), and 1 for a zero vector (it contributes nothing whatever its
/// coefficient; the other vector then passes unchanged, since their dot product is 0).
double adasum_coefficient(double dot, double norm2);

/// The pair's sums over `count` elements: sums[0] = lower.upper, sums[1] = |lower|^2,
/// sums[2] = |upper|^2, accumulated in double from 0.
void adasum_partials(const void* lower, const void* upper, int64_t count, DataType dtype,
                     double sums[3]);

/// out[i] = c_lower * lower[i] + c_upper * upper[i], computed in double and rounded once to
/// `dtype`; `out` may be `lower` or `upper` (each element is read before it is written).
void adasum_blend(void* out, const void* lower, const void* upper, int64_t count, DataType dtype,
                  double c_lower, double c_upper);

}  // namespace hvd
