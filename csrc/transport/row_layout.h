// Copyright horovod_cpp authors. How the row-shaped collectives divide dimension 0 among the
// members of a process set, computed once for every transport (MPI, shared memory, NCCL): what
// an alltoall sends to and receives from each member, and which rows of a reducescatter each
// member keeps. Both follow from the batch's agreed values alone (shape, dtype, first
// dimensions, splits), so every rank computes the same plan without another message.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/batch.h"

namespace hvd {

/// Elements in one row of dimension 0 (the product of the other dimensions; 1 for a vector).
int64_t row_elements(const Shape& shape);

/// An allgather: bytes each member contributes (in member order) and the output's shape.
struct AllgatherPlan {
  std::vector<int64_t> bytes;
  Shape shape;
};
AllgatherPlan plan_allgather(const Batch& b);

/// An alltoall seen from member `rank` of `size`: bytes sent to and received from each member
/// (in member order, the order of the blocks in the input and the output), rows received from
/// each (the output's splits) and the output's first dimension.
struct AlltoallPlan {
  std::vector<int64_t> send_bytes, recv_bytes, recv_rows;
  /// Where, in each member's input, the block it sends this member starts (bytes).
  std::vector<int64_t> recv_from;
  int64_t rows = 0;
};
AlltoallPlan plan_alltoall(const Batch& b, int size, int rank);
/// The most bytes any member of an alltoall sends any member (the same on every rank).
int64_t alltoall_longest_block(const Batch& b);

/// A reducescatter's rows of dimension 0, dealt out evenly, the first dim0 % size members
/// getting one more: rows and elements per member.
struct ReducescatterSplit {
  std::vector<int64_t> rows, counts;
  /// Every member gets the same number of elements (the collective's block form applies).
  bool equal() const;
};
ReducescatterSplit split_reducescatter(const Batch& b, int size);

}  // namespace hvd
