// Copyright horovod_cpp authors.
#include "coordination/message.h"

#include <algorithm>

namespace hvd {

bool Request::operator==(const Request& o) const {
  return rank == o.rank && op == o.op && name == o.name && dtype == o.dtype && shape == o.shape &&
         device == o.device && reduce_op == o.reduce_op && prescale == o.prescale &&
         postscale == o.postscale && root == o.root && group == o.group &&
         group_size == o.group_size && splits == o.splits && error == o.error;
}

int64_t Response::nbytes_for_rank(int rank) const {
  int64_t n = num_elements(shape);
  if (op == OpType::kAllgather || op == OpType::kAlltoall) {
    const int64_t d0 = shape.empty() ? 1 : shape[0];
    const int64_t row = d0 == 0 ? num_elements(Shape(shape.begin() + 1, shape.end())) : n / d0;
    n = saturating_mul(row, first_dims.at(static_cast<size_t>(rank)));
  }
  return saturating_mul(n, static_cast<int64_t>(dtype_size(dtype)));
}

bool Response::matches(const Request& req, int rank) const {
  if (!ok() || req.op != op || req.name != name || req.dtype != dtype || req.device != device ||
      req.group != group || req.group_size != group_size) {
    return false;
  }
  switch (op) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      return req.shape == shape && req.reduce_op == reduce_op && req.prescale == prescale &&
             req.postscale == postscale;
    case OpType::kAlltoall: {
      const size_t n = first_dims.size();
      if (req.shape.size() != shape.size() || req.shape.empty() || rank >= static_cast<int>(n) ||
          req.shape[0] != first_dims[static_cast<size_t>(rank)] || req.splits.size() != n ||
          all_splits.size() < n * (static_cast<size_t>(rank) + 1)) {
        return false;
      }
      if (!std::equal(req.shape.begin() + 1, req.shape.end(), shape.begin() + 1)) return false;
      return std::equal(req.splits.begin(), req.splits.end(),
                        all_splits.begin() + static_cast<std::ptrdiff_t>(n) * rank);
    }
    case OpType::kJoin:
      return false;  // never cached
    case OpType::kBroadcast:
      return req.shape == shape && req.root == root;
    case OpType::kAllgather:
      if (req.shape.size() != shape.size() || req.shape.empty()) return false;
      if (!std::equal(req.shape.begin() + 1, req.shape.end(), shape.begin() + 1)) return false;
      return rank < static_cast<int>(first_dims.size()) &&
             req.shape[0] == first_dims[static_cast<size_t>(rank)];
    case OpType::kBarrier:
      return true;
  }
  return false;
}

}  // namespace hvd
