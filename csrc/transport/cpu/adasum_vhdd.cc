// Copyright horovod_cpp authors.
#include "transport/cpu/adasum_vhdd.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace hvd {

std::pair<int64_t, int64_t> adasum_piece(int rank, int levels, int64_t count) {
  int64_t lo = 0, hi = count;
  for (int k = 0; k < levels; ++k) {
    const int64_t mid = lo + (hi - lo) / 2;
    if ((rank >> k) & 1) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return {lo, hi};
}

Status AdasumVhdd::exchange(DataPlane& plane, int ranks, const void* in, int to, int64_t send,
                            int from, int64_t recv) {
  send_bytes_.assign(static_cast<size_t>(ranks), 0);
  recv_bytes_.assign(static_cast<size_t>(ranks), 0);
  if (to >= 0) send_bytes_[static_cast<size_t>(to)] = send;
  if (from >= 0) recv_bytes_[static_cast<size_t>(from)] = recv;
  // Never empty: the plane gets a valid pointer even when nothing arrives.
  if (static_cast<int64_t>(recv_.size()) < std::max<int64_t>(recv, 1)) {
    recv_.resize(static_cast<size_t>(std::max<int64_t>(recv, 1)));
  }
  return plane.alltoallv(in, send_bytes_, recv_.data(), recv_bytes_);
}

Status AdasumVhdd::run(DataPlane& plane, int rank, int ranks, void* buf, int64_t count,
                       DataType dtype, const std::vector<AdasumSegment>& segments) {
  if (ranks <= 1 || count <= 0) return Status::OK();
  unsigned char* base = static_cast<unsigned char*>(buf);
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  const int p = adasum_power_of_two(ranks);
  const bool active = rank < p;

  // 1. Fold the ranks above P into ranks 0 .. ranks - P - 1.
  if (p < ranks) {
    const int to = active ? -1 : rank - p;
    const int from = active && rank + p < ranks ? rank + p : -1;
    HVD_RETURN_IF_ERROR(exchange(plane, ranks, base, to, count * es, from, count * es));
    if (from >= 0) {
      for (const AdasumSegment& s : segments) {
        adasum_pair(base + s.offset, recv_.data() + s.offset, s.count, dtype);
      }
    }
  }

  // 2. Halve the vector and double the distance.
  const int64_t n_seg = static_cast<int64_t>(segments.size());
  int levels = 0;
  int64_t lo = 0, hi = count;  // this rank's range of the vector (elements)
  for (int d = 1; d < p; d *= 2, ++levels) {
    const int64_t mid = lo + (hi - lo) / 2;
    const bool lower = active && (rank & d) == 0;
    const int64_t keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
    const int64_t send_lo = lower ? mid : lo, send_n = lower ? hi - mid : mid - lo;
    const int partner = active ? rank ^ d : -1;
    // Partners hold the same range: each receives the other's part of the half it keeps.
    HVD_RETURN_IF_ERROR(exchange(plane, ranks, base + send_lo * es, partner, send_n * es, partner,
                                 (keep_hi - keep_lo) * es));
    const int64_t groups = p / (2 * d);
    sums_.assign(static_cast<size_t>(groups * n_seg * 3), 0.0);
    const unsigned char* other = recv_.data();
    // The kept range cuts segments: each one's part inside it.
    auto each_part = [&](auto&& fn) {
      for (int64_t k = 0; k < n_seg; ++k) {
        const int64_t first = segments[static_cast<size_t>(k)].offset / es;
        const int64_t a = std::max(first, keep_lo);
        const int64_t b = std::min(first + segments[static_cast<size_t>(k)].count, keep_hi);
        if (a < b) fn(k, a, b - a);
      }
    };
    if (active) {
      double* mine = sums_.data() + (rank / (2 * d)) * n_seg * 3;
      each_part([&](int64_t k, int64_t at, int64_t n) {
        const unsigned char* own = base + at * es;
        const unsigned char* theirs = other + (at - keep_lo) * es;
        adasum_partials(lower ? own : theirs, lower ? theirs : own, n, dtype, mine + k * 3);
      });
    }
    HVD_RETURN_IF_ERROR(plane.allreduce(sums_.data(), static_cast<int64_t>(sums_.size()),
                                        DataType::kFloat64, ReduceOp::kSum));
    if (active) {
      const double* group = sums_.data() + (rank / (2 * d)) * n_seg * 3;
      each_part([&](int64_t k, int64_t at, int64_t n) {
        const double* s = group + k * 3;
        unsigned char* own = base + at * es;
        const unsigned char* theirs = other + (at - keep_lo) * es;
        adasum_blend(own, lower ? own : theirs, lower ? theirs : own, n, dtype,
                     adasum_coefficient(s[0], s[1]), adasum_coefficient(s[0], s[2]));
      });
    }
    lo = keep_lo;
    hi = keep_hi;
  }

  // 3. Every rank gets every piece.
  piece_bytes_.assign(static_cast<size_t>(ranks), 0);
  for (int r = 0; r < p; ++r) {
    const auto piece = adasum_piece(r, levels, count);
    piece_bytes_[static_cast<size_t>(r)] = (piece.second - piece.first) * es;
  }
  if (static_cast<int64_t>(gather_.size()) < count * es) {
    gather_.resize(static_cast<size_t>(count * es));
  }
  HVD_RETURN_IF_ERROR(
      plane.allgatherv(base + (active ? lo : 0) * es, gather_.data(), piece_bytes_));
  int64_t at = 0;
  for (int r = 0; r < p; ++r) {
    const int64_t n = piece_bytes_[static_cast<size_t>(r)];
    if (r != rank && n > 0) {
      std::memcpy(base + adasum_piece(r, levels, count).first * es, gather_.data() + at,
                  static_cast<size_t>(n));
    }
    at += n;
  }
  return Status::OK();
}

}  // namespace hvd
