// Copyright horovod_cpp authors. Adasum over a DataPlane by vector-halving distance-doubling.
//
// The combination order is the one of kernels/host/adasum.h (fold the ranks above the largest
// power of two P into ranks 0.., then the distance-doubling tree over P), run without gathering
// every rank's buffer:
//   1. Fold: rank P + j sends its buffer to rank j, which combines the two locally.
//   2. Level k = 0 .. log2(P) - 1 (distance d = 2^k): rank r and its partner r ^ d hold the
//      same range of the vector; the lower one keeps the first half, the upper one the second,
//      and each sends the other half to its partner (one alltoallv with a single nonzero
//      count per rank). Each rank then has, for its kept half, the piece of both sides' vectors
//      and adds its partial (dot, |lower|^2, |upper|^2) per segment to the array of its group
//      (the 2d ranks r >> (k + 1) names) in one small allreduce of doubles over all ranks, so
//      that every rank has its group's whole-vector sums and combines its half with them.
//   3. After the last level rank r (< P) holds the final values of its 1/P of the buffer; one
//      allgatherv gives every rank (the folded ones too) every piece, so all end with the same
//      bytes.
// Traffic per rank is about twice the buffer (plus the fold's one buffer for the ranks above
// P) instead of set size x buffer; scratch is 1.5 buffers (2 on a rank that takes a fold).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kernels/host/adasum.h"
#include "transport/data_plane.h"

namespace hvd {

/// The schedule's scratch, kept between calls (a CpuTransport owns one).
class AdasumVhdd {
 public:
  /// Replaces `buf` (`count` elements of floating `dtype`, `segments` its tensors, byte
  /// offsets) on every rank of `plane` (`rank` of `ranks`) with the Adasum of all ranks'
  /// buffers. Every rank calls it with the same count, dtype and segments.
  Status run(DataPlane& plane, int rank, int ranks, void* buf, int64_t count, DataType dtype,
             const std::vector<AdasumSegment>& segments);

 private:
  /// Sends `send` bytes at `in` to rank `to` and receives `recv` bytes from rank `from` into
  /// recv_ (a rank of -1: nothing): one alltoallv over all ranks.
  Status exchange(DataPlane& plane, int ranks, const void* in, int to, int64_t send, int from,
                  int64_t recv);

  std::vector<unsigned char> recv_;    // the partner's half, or the folded rank's buffer
  std::vector<unsigned char> gather_;  // the final pieces in rank order
  std::vector<double> sums_;           // (group, segment, {dot, |lower|^2, |upper|^2})
  std::vector<int64_t> send_bytes_, recv_bytes_, piece_bytes_;
};

/// The elements [first, second) of the buffer that rank `rank` (< P) holds after `levels`
/// levels of halving a buffer of `count` elements.
std::pair<int64_t, int64_t> adasum_piece(int rank, int levels, int64_t count);

}  // namespace hvd
