// Copyright horovod_cpp authors. Adasum (adaptive summation) of host vectors.
//
// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021)
// combines two gradients a and b as
//     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// which is a + b for orthogonal vectors and their average for parallel ones. A set of ranks is
// combined pairwise in a binary tree: at level L (distance d = 2^L) slot i, for i a multiple of
// 2d, takes the combination of itself and slot i + d when that slot exists; a slot without a
// partner is carried up unchanged and combined at a later level. For a power-of-two count this
// is the tree of Horovod's vector-halving distance-doubling schedule; for any other count the
// extra slots join at the level where their subtree meets the rest.
//
// Every tensor of a fused buffer is its own vector (its own dot product and norms). Dot
// products and norms accumulate in double; each combined element is computed in double and
// rounded once to the tensor's type (half types: through float's range).
#pragma once

#include <cstdint>

#include "horovod_cpp/types.h"

namespace hvd {

/// One tensor of a buffer: its first element's byte offset and its element count.
struct AdasumSegment {
  int64_t offset = 0;
  int64_t count = 0;
};

/// Combines `ranks` vectors laid out one after another in `slots` (rank r's at
/// r * slot_bytes) by the tree above, each of the `n_segments` segments separately; the
/// result is left in slot 0 (the other slots are overwritten). `dtype` must be a floating
/// type (submission refuses the others).
void adasum_tree(void* slots, int ranks, int64_t slot_bytes, const AdasumSegment* segments,
                 int64_t n_segments, DataType dtype);

/// Combines `a` and `b` (`count` elements of `dtype`) into `a`: one step of the tree.
void adasum_pair(void* a, const void* b, int64_t count, DataType dtype);

}  // namespace hvd
