// Copyright horovod_cpp authors. Every rank's check of rank 0's fresh responses against what
// it asked for itself.
//
// Rank 0 builds each response from every rank's request (validate.h), and the executor, the
// transports and the row layouts size every buffer from that response. A rank whose memory
// was corrupted (or a hostile one) at rank 0 could otherwise announce a larger shape, another
// dtype or op, or huge splits, and make every other rank read and write past its tensors. So
// each rank compares a fresh response with the digest of its own request that it kept in its
// table (PendingTensor::asked), before anything is sized from it; the controller then makes
// every rank fail a tensor that any rank found wrong (Controller::set_response_check).
#pragma once

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

/// A digest of a shape (its rank and every extent); equal shapes give equal digests.
uint64_t shape_digest(const int64_t* dims, size_t ndims);
/// The digest of the parameters of `op` beyond shape, dtype and root: allreduce and
/// reducescatter: reduce op, prescale and postscale; alltoall: the splits this rank sends.
uint64_t params_digest(OpType op, ReduceOp reduce_op, double prescale, double postscale,
                       const int64_t* splits, size_t nsplits);
/// The digest of `q`, computed where the request is complete (ProcessSetState::fill).
RequestDigest digest_of(const Request& q);
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
