// Copyright horovod_cpp authors.
#include "coordination/test_faults.h"

namespace hvd {

void corrupt_response_for_test(Response* r, const std::string& mode, int size) {
  if (!r->ok() || r->name.rfind(kCorruptPrefix, 0) != 0) return;
  const bool rows = r->op == OpType::kAllgather || r->op == OpType::kAlltoall;
  const size_t last = static_cast<size_t>(size - 1);
  if (mode == "shape" && !r->shape.empty()) {
    r->shape[0] *= 2;
    if (rows) {
      for (int64_t& d : r->first_dims) d *= 2;
    }
  } else if (mode == "dtype") {
    r->dtype = r->dtype == DataType::kFloat64 ? DataType::kFloat32 : DataType::kFloat64;
  } else if (mode == "op") {
    r->op = r->op == OpType::kBroadcast ? OpType::kAllreduce : OpType::kBroadcast;
  } else if (mode == "reduce") {
    r->reduce_op = r->reduce_op == ReduceOp::kMax ? ReduceOp::kMin : ReduceOp::kMax;
  } else if (mode == "root") {
    r->root = (r->root + 1) % size;
  } else if (mode == "scalar" && rows) {
    r->shape.clear();
  } else if (mode == "splits" && r->op == OpType::kAlltoall && r->all_splits.size() > last) {
    r->all_splits[last * static_cast<size_t>(size)] = int64_t{1} << 40;
  } else if (mode == "first_dim" && rows && r->first_dims.size() > last) {
    r->first_dims[last] += 1;
    if (r->op == OpType::kAlltoall) r->all_splits[last * static_cast<size_t>(size)] += 1;
  }
}

}  // namespace hvd
