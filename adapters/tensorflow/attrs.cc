// Copyright horovod_cpp authors. Reading of the shared op attributes (attrs.h).
#include "attrs.h"

#include <cstdint>

namespace hvd_tf {

absl::Status read_process_set(tensorflow::OpKernelConstruction* ctx, hvd::ProcessSet* set) {
  int64_t id = 0;
  TF_RETURN_IF_ERROR(ctx->GetAttr("process_set_id", &id));
  set->id = static_cast<int>(id);
  return absl::OkStatus();
}

absl::Status read_naming(tensorflow::OpKernelConstruction* ctx, const std::string& node_name,
                         Naming* out) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("tensor_name", &out->name));
  TF_RETURN_IF_ERROR(ctx->GetAttr("name_from_node", &out->from_node));
  // In a graph the node's name is unique and the same on every rank.
  if (out->from_node) out->name = node_name;
  return read_process_set(ctx, &out->set);
}

absl::Status read_reduction(tensorflow::OpKernelConstruction* ctx, Reduction* out) {
  int64_t op = 1;
  TF_RETURN_IF_ERROR(ctx->GetAttr("reduce_op", &op));
  TF_RETURN_IF_ERROR(ctx->GetAttr("prescale_factor", &out->prescale));
  TF_RETURN_IF_ERROR(ctx->GetAttr("postscale_factor", &out->postscale));
  out->op = static_cast<hvd::ReduceOp>(op);
  return absl::OkStatus();
}

}  // namespace hvd_tf
