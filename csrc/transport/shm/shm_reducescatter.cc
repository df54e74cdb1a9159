// Copyright horovod_cpp authors. Reduce-scatter through the shared-memory segments of
// ShmAllreduce (shm_allreduce.h describes the segments and counters).
//
// Per byte of its block a rank reads its own input and every peer's published piece once and
// writes the result once; each rank copies (n-1)/n of its input into its slot. Open MPI's
// reduce-scatter on one host (a reduce to one rank, then a scatter) moves several times more.
#include <algorithm>
#include <cstring>

#include "kernels/host/cpu_ops.h"
#include "transport/shm/shm_allreduce.h"

namespace hvd {

Status ShmAllreduce::reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                                   DataType dtype, ReduceOp op, double prescale, double scale,
                                   int64_t divisor) {
  const int n = size_, me = rank_;
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  // Each round moves up to `per` elements of every block: the slot holds one piece per rank.
  const int64_t per = std::max<int64_t>(1, chunk_bytes_ / esize / n);
  std::vector<int64_t> offset(static_cast<size_t>(n) + 1, 0);
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) {
    offset[static_cast<size_t>(r) + 1] = offset[static_cast<size_t>(r)] + counts[static_cast<size_t>(r)];
    longest = std::max(longest, counts[static_cast<size_t>(r)]);
  }
  const unsigned char* src = static_cast<const unsigned char*>(in);
  unsigned char* dst = static_cast<unsigned char*>(out);
  // Elements of block r in round k: [k*per, k*per + piece(r, k)).
  auto piece = [&](int r, int64_t lo) {
    return std::max<int64_t>(0, std::min(per, counts[static_cast<size_t>(r)] - lo));
  };

  // Pieces lie `stride` elements apart in the slot: a round takes no more than it needs.
  const int64_t stride = std::min(per, longest);
  for (int64_t lo = 0; lo < longest; lo += per) {
    const Round rd = next_round(n * stride * esize);
    const uint64_t s = rd.s;
    // The slot was last used two rounds ago: every peer must have read it.
    if (s >= 2) HVD_RETURN_IF_ERROR(wait_all(kCollected, s - 1));

    // 1. publish, prescaled, the piece of every peer's block
    unsigned char* mine = slot(me, rd);
    for (int j = 0; j < n; ++j) {
      const int64_t cnt = piece(j, lo);
      if (j == me || cnt == 0) continue;
      unsigned char* at = mine + j * stride * esize;
      std::memcpy(at, src + (offset[static_cast<size_t>(j)] + lo) * esize, static_cast<size_t>(cnt * esize));
      scale_buffer(at, cnt, dtype, prescale);  // no-op for 1
    }
    signal(kPublished, s + 1);
    HVD_RETURN_IF_ERROR(wait_all(kPublished, s + 1));

    // 2. my piece, folded in rank order ((x0 op x1) op x2) ... like the shm allreduce, so a
    // value does not depend on which rank owns it. My own input is read where it lies, or,
    // prescaled, from my slot's own piece (unused by step 1).
    const int64_t cnt = piece(me, lo);
    if (cnt > 0) {
      unsigned char* p = dst + lo * esize;
      const unsigned char* own = src + (offset[static_cast<size_t>(me)] + lo) * esize;
      if (prescale != 1.0) {
        unsigned char* scaled = mine + me * stride * esize;
        std::memcpy(scaled, own, static_cast<size_t>(cnt * esize));
        scale_buffer(scaled, cnt, dtype, prescale);
        own = scaled;
      }
      auto x = [&](int j) -> const unsigned char* { return j == me ? own : slot(j, rd) + me * stride * esize; };
      // A segment set has >= 2 ranks (shm_setup.cc).
      fold_reduction(p, x(0), x(1), x, n, cnt, dtype, op, scale, divisor);
    }
    // Done with the peers' slots of this round (reduced and collected, in allreduce's terms).
    signal(kReduced, s + 1);
    signal(kCollected, s + 1);
  }
  return Status::OK();
}

}  // namespace hvd
