// Copyright horovod_cpp authors. Requests and responses exchanged by the coordinator.
//
// A Request is one rank's wish to run a named collective; a Response is rank 0's decision that
// every rank runs it (or that it fails everywhere). Both travel serialized (wire.h); their
// fields are plain values so that the negotiation can be tested without MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_type.h"
#include "horovod_cpp/tensor.h"
#include "horovod_cpp/types.h"

namespace hvd {

/// The fixed name of join requests (one join at a time per process).
constexpr const char* kJoinName = "horovod_cpp.join";

/// Request::local_tag and Request::cache_hint when there is none.
constexpr uint32_t kNoLocalTag = UINT32_MAX;

/// One rank's submission of one named tensor.
struct Request {
  /// User-provided on purpose (as TensorSubmit's): `emplace_back()` value-initializes, which
  /// for an implicit constructor first zeroes the whole object (a `rep stos`, 15% of
  /// the submission of one tensor) before the member initializers run.
  Request() {}  // NOLINT(modernize-use-equals-default)
  int32_t rank = 0;
  OpType op = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  Device device;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  /// Grouped allreduce: every member carries the group's key and size; the group runs only
  /// when all members are ready on every rank. Empty when not grouped.
  std::string group;
  int32_t group_size = 0;
  /// Alltoall: rows of dimension 0 sent to each rank (one entry per rank of the set).
  std::vector<int64_t> splits;
  /// Non-empty: this rank could not submit the tensor (a check only it could make failed:
  /// a bad argument, an unusable device, a failed allocation). The coordinator fails the
  /// tensor on every rank with a message naming this rank and this reason, so no other rank
  /// waits for it. Such a request is never a cache hit.
  std::string error;
  /// Local only, never serialized nor compared. The submitter's own number for this tensor
  /// (the process set's place for it), handed back with a cache hit's response so the tensor
  /// is found without its name (CycleResult::hits).
  uint32_t local_tag = kNoLocalTag;
  /// Local only, never serialized nor compared: the cache position this name had the last
  /// time it ran here, or kNoLocalTag. Only a hint: the controller uses it after checking
  /// that the position still holds this name, and looks the name up otherwise.
  uint32_t cache_hint = kNoLocalTag;

  bool operator==(const Request& o) const;
};

/// Rank 0's decision on one tensor.
struct Response {
  OpType op = OpType::kAllreduce;
  std::string name;
  /// Empty: run it. Otherwise every rank fails this tensor with this message.
  std::string error;
  DataType dtype = DataType::kFloat32;
  /// Allreduce/broadcast: the shape; allgather: the shape of rank 0's input (dimension 0 varies).
  Shape shape;
  Device device;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  std::string group;
  int32_t group_size = 0;
  /// Allgather, alltoall: dimension 0 of each rank's input, in rank order. Join: the ranks
  /// that had joined when this tensor ran (they contributed zeros).
  std::vector<int64_t> first_dims;
  /// Alltoall: every rank's splits, row r = what rank r sends to each rank (size x size).
  std::vector<int64_t> all_splits;
  /// Local only, never serialized: nonzero on the response cache's entries (a number no other
  /// entry had) and on copies of them, so a copy that is still equal need not be made again.
  uint64_t cache_stamp = 0;

  bool ok() const { return error.empty(); }
  /// Bytes this rank contributes (allgather: per first_dims[rank]).
  int64_t nbytes_for_rank(int rank) const;
  /// True when `req` (from `rank`) asks for exactly what this successful response ran.
  bool matches(const Request& req, int rank) const;
};

/// Everything one rank sends rank 0 in a full (uncached) negotiation cycle.
struct RequestList {
  std::vector<Request> requests;
  bool shutdown = false;  ///< this rank called shutdown()
  /// Cache bits this rank holds pending, sent when rank 0 asked for a stall report.
  std::vector<uint32_t> pending_cache_bits;
};

/// What rank 0 broadcasts back; every rank executes `responses` in order.
struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;
  /// The shutdown is fatal to the job (a stall): the ranks cannot all finish cleanly, so
  /// every rank ends the job unless the program re-initializes in time (common/fatal.h).
  bool fatal = false;
  /// Why the job shuts down (names the ranks that asked, or the stalled tensors).
  std::string shutdown_reason;
};

}  // namespace hvd
