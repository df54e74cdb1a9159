// Copyright horovod_cpp authors.
#include "transport/batch.h"

namespace hvd {

ReductionSpec make_reduction_spec(ReduceOp op, DataType dtype, double prescale, double postscale,
                                  int set_size) {
  ReductionSpec s;
  s.op = op;
  s.prescale = prescale;
  s.postscale = postscale;
  s.scale = op == ReduceOp::kAverage ? postscale / static_cast<double>(set_size) : postscale;
  // Integers are scaled (in double, truncated) only when a postscale asks; otherwise their
  // Average divides exactly. Bool takes neither.
  if (!is_floating_point(dtype) && postscale == 1.0) {
    s.scale = 1.0;
    if (op == ReduceOp::kAverage && dtype != DataType::kBool) s.divisor = set_size;
  }
  return s;
}

std::string Batch::describe() const {
  if (tensors.size() == 1) return std::string(op_type_name(op)) + " '" + name() + "'";
  std::string s = "fused " + std::string(op_type_name(op)) + " of ";
  for (size_t k = 0; k < tensors.size() && k < 8; ++k) {
    s += (k ? ", '" : "'") + *tensors[k].name + "'";
  }
  if (tensors.size() > 8) s += ", ... (" + std::to_string(tensors.size()) + " tensors)";
  return s;
}

}  // namespace hvd
