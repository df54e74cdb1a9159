// Copyright horovod_cpp authors. The attributes the collective ops share, written once: their
// declarations (spliced into the REGISTER_OP chains of ops.cc) and their reading (by the kernels
// of kernels.cc, once per kernel construction).
#pragma once

#include <horovod_cpp/horovod_cpp.h>

#include <string>

#include "tensorflow/core/framework/op_kernel.h"

// clang-format off
// Every collective: `tensor_name` (the name the ranks match the collective by; empty: the
// runtime numbers calls of that op in call order, which is what eager mode uses),
// `name_from_node` (graphs: use the node's name, unique in its graph and the same on every
// rank, instead of tensor_name) and `process_set_id` (0: every rank).
#define HVD_TF_NAMING_ATTRS             \
  .Attr("tensor_name: string = ''")     \
  .Attr("name_from_node: bool = false") \
  HVD_TF_PROCESS_SET_ATTR

// The process set an op runs on (barrier has only this one).
#define HVD_TF_PROCESS_SET_ATTR .Attr("process_set_id: int = 0")

// The reducing collectives (allreduce, grouped allreduce, reducescatter): the op (horovod_cpp's
// Sum=0, Average=1, Min=2, Max=3, Product=4) and the factors applied before and after it.
#define HVD_TF_REDUCE_ATTRS              \
  .Attr("reduce_op: int")                \
  .Attr("prescale_factor: float = 1.0")  \
  .Attr("postscale_factor: float = 1.0")
// clang-format on

namespace hvd_tf {

/// The process set of an op's `process_set_id` attribute.
absl::Status read_process_set(tensorflow::OpKernelConstruction* ctx, hvd::ProcessSet* set);

/// A collective's naming attributes (HVD_TF_NAMING_ATTRS) as the kernel uses them.
struct Naming {
  std::string name;  ///< the collective's name: tensor_name, or the node's name in graphs
  bool from_node = false;
  hvd::ProcessSet set;
};

/// Reads HVD_TF_NAMING_ATTRS; `node_name` is the kernel's node name.
absl::Status read_naming(tensorflow::OpKernelConstruction* ctx, const std::string& node_name,
                         Naming* out);

/// The reduction of HVD_TF_REDUCE_ATTRS.
struct Reduction {
  hvd::ReduceOp op = hvd::ReduceOp::kAverage;
  float prescale = 1.f;
  float postscale = 1.f;

  /// Options of type O (hvd::AllreduceOptions, hvd::ReducescatterOptions) on `set`.
  template <typename O>
  O options(const hvd::ProcessSet& set) const {
    O o;
    o.op = op;
    o.prescale_factor = prescale;
    o.postscale_factor = postscale;
    o.process_set = set;
    return o;
  }
};

/// Reads HVD_TF_REDUCE_ATTRS.
absl::Status read_reduction(tensorflow::OpKernelConstruction* ctx, Reduction* out);

}  // namespace hvd_tf
