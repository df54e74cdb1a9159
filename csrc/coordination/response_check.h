// Copyright horovod_cpp authors. Every rank's check of rank 0's fresh responses against what
// it asked for itself.
//
// Rank 0 builds each response from every rank's request (validate.h), and the executor, the
// transports and the row layouts size every buffer from that response. A rank whose memory
// was corrupted (or a hostile one) at rank 0 could otherwise announce a larger shape, another
// dtype or op, or huge splits, and make every other rank read and write past its tensors. So
// each rank compares a fresh response with the digest of its own request that it kept in its
// table when it sent the request in full (PendingTensor::asked), before anything is sized
// from it; the controller then makes every rank fail a tensor that any rank found wrong
// (Controller::set_response_check).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "coordination/message.h"

namespace hvd {

/// What a rank keeps of its own request, besides the op, dtype and device its table already
/// holds: enough to check a response, in 40 bytes (the request's shape and splits went to the
/// negotiation, and the table entry is written once per submitted tensor). The sizes that
/// buffers are made from (elements, first dimension) are kept as they are, so that memory
/// safety never rests on the digests; the digests catch the rest (the exact shape, scale
/// factors and splits).
struct RequestDigest {
  int64_t numel = 0;         ///< elements of the request's shape
  int64_t dim0 = -1;         ///< the shape's first extent; -1 for a scalar
  uint64_t shape_hash = 0;   ///< shape_digest() of the request's shape
  uint64_t params_hash = 0;  ///< params_digest(): the scale factors, or alltoall's splits
  int32_t root = 0;          ///< broadcast: the root (a global rank)
  ReduceOp reduce_op = ReduceOp::kSum;
};

/// A request as the check sees it: the table's op, dtype and device, and the digest.
struct AskedFor {
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  Device device;
  RequestDigest digest;
};

namespace detail {
/// One step of a cheap 64-bit mix (a multiply and a shift: the digests are made for every
/// submitted tensor, inline). Not a defence against a chosen collision: the sizes buffers are
/// made from are compared as they are.
inline uint64_t mix(uint64_t h, uint64_t x) {
  h = (h ^ x) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}
inline uint64_t double_bits(double d) {
  uint64_t u;
  __builtin_memcpy(&u, &d, sizeof(u));
  return u;
}
}  // namespace detail

/// A digest of a shape of two or more dimensions (its rank and every extent); 0 for fewer, which
/// the elements and the first extent (RequestDigest::numel, dim0) already pin down.
inline uint64_t shape_digest(const int64_t* dims, size_t ndims) {
  if (ndims < 2) return 0;
  uint64_t h = detail::mix(0x68766463707073ull, ndims);
  for (size_t i = 0; i < ndims; ++i) h = detail::mix(h, static_cast<uint64_t>(dims[i]));
  return h;
}
/// The digest of the parameters of `op` beyond shape, dtype and root: allreduce and
/// reducescatter: reduce op, prescale and postscale (the reduce op alone when both are 1, the
/// common case); alltoall: the splits this rank sends; 0 for the others.
inline uint64_t params_digest(OpType op, ReduceOp reduce_op, double prescale, double postscale,
                              const int64_t* splits, size_t nsplits) {
  if (op == OpType::kAllreduce || op == OpType::kReducescatter) {
    const uint64_t h = static_cast<uint64_t>(reduce_op) + 1;
    if (prescale == 1.0 && postscale == 1.0) return h;
    return detail::mix(detail::mix(h << 8, detail::double_bits(prescale)),
                       detail::double_bits(postscale));
  }
  if (op != OpType::kAlltoall) return 0;
  uint64_t h = detail::mix(0x73706c697473ull, nsplits);
  for (size_t i = 0; i < nsplits; ++i) h = detail::mix(h, static_cast<uint64_t>(splits[i]));
  return h;
}
/// The digest of `q`, made when it is sent in full (TensorTable::note_sent()), the only
/// requests a fresh response can answer: one pass over the shape.
inline RequestDigest digest_of(const Request& q) {
  RequestDigest d;
  const int64_t* dims = q.shape.data();
  const size_t nd = q.shape.size();
  // The elements as num_elements() counts them (saturating; a request's extents are checked
  // non-negative where it is submitted, or it carries an error and is never checked).
  int64_t n = 1;
  bool zero = false;
  for (size_t i = 0; i < nd; ++i) {
    zero |= dims[i] == 0;
    if (__builtin_mul_overflow(n, dims[i], &n)) n = INT64_MAX;
  }
  d.numel = zero ? 0 : n;
  d.dim0 = nd == 0 ? -1 : dims[0];
  d.shape_hash = shape_digest(dims, nd);
  d.params_hash = params_digest(q.op, q.reduce_op, q.prescale, q.postscale, q.splits.data(),
                                q.splits.size());
  d.root = q.root;
  d.reduce_op = q.reduce_op;
  return d;
}
/// `q` as the check sees it (tests and the fuzzer; the runtime builds it from its table).
AskedFor asked_for(const Request& q);

/// Checks that the successful response `r` runs what member `rank` of a set of `size` asked
/// for (`mine`): op, dtype, device, shape (allreduce, broadcast, reducescatter: equal;
/// allgather, alltoall: at least one dimension, this rank's first dimension as asked, the
/// others equal), reduce op and scale factors, root, alltoall's splits (this rank's row as
/// asked, every count non-negative, every row and column summed without overflow, within
/// the byte limits), and the size of every per-rank vector. Returns a Mismatch naming the
/// rank and what differs ("rank 2 asked for float32[4,4]: the response has float32[8,4]").
Status check_response_against_request(const Response& r, const AskedFor& mine, int rank, int size);

/// The structural checks of `r` that need no request (sizes of first_dims and all_splits,
/// signs, overflow of alltoall's row and column sums and of their byte counts); part of
/// check_response_against_request(), and what row_layout's plans rely on.
Status check_response_sizes(const Response& r, int size);

}  // namespace hvd
