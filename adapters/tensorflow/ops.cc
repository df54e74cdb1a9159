// Copyright horovod_cpp authors. Registration of the TensorFlow ops and their shape functions.
//
// Every collective carries the naming attributes and the reducing ones the reduction
// attributes, both declared in attrs.h (which the kernels read them through). Gradients are
// registered in Python (horovod_cpp/tensorflow/mpi_ops.py). CPU kernels: kernels.cc; a GPU
// kernel can be registered for the same ops on the same runtime path.
#include "attrs.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hvd_tf {
namespace {

using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

#define HVD_TF_TYPES "{uint8, int8, int16, int32, int64, half, bfloat16, float, double, bool}"
// The collectives that only move data take uint16 too, as Horovod's do (the runtime's uint16:
// a rank passing int16 where another passes uint16 gets a dtype mismatch).
#define HVD_TF_MOVE_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}"

// Output 0 has the shape of input 0 except for an unknown first dimension.
absl::Status first_dim_unknown(InferenceContext* c) {
  ShapeHandle in = c->input(0);
  if (!c->RankKnown(in)) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  ShapeHandle at_least_1;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(in, 1, &at_least_1));
  ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(at_least_1, 0, c->UnknownDim(), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

// Every output i has the shape of input i except for an unknown first dimension.
absl::Status first_dims_unknown(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) {
    ShapeHandle in = c->input(i);
    if (!c->RankKnown(in)) {
      c->set_output(i, c->UnknownShape());
      continue;
    }
    ShapeHandle at_least_1, out;
    TF_RETURN_IF_ERROR(c->WithRankAtLeast(in, 1, &at_least_1));
    TF_RETURN_IF_ERROR(c->ReplaceDim(at_least_1, 0, c->UnknownDim(), &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

}  // namespace

// The attribute macros of attrs.h continue the builder chains.
// clang-format off
REGISTER_OP("HorovodCppAllreduce")
    .Attr("T: " HVD_TF_TYPES)
    HVD_TF_REDUCE_ATTRS
    HVD_TF_NAMING_ATTRS
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc("Reduces `tensor` across the ranks of the process set (reduce_op: horovod_cpp's "
         "Sum=0, Average=1, Min=2, Max=3, Product=4).");

REGISTER_OP("HorovodCppGroupedAllreduce")
    .Attr("T: " HVD_TF_TYPES)
    .Attr("N: int >= 1")
    HVD_TF_REDUCE_ATTRS
    HVD_TF_NAMING_ATTRS
    .Input("tensors: N * T")
    .Output("outputs: N * T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("Reduces a list of tensors as one unit (negotiated and fused together).");

REGISTER_OP("HorovodCppAllgather")
    .Attr("T: " HVD_TF_MOVE_TYPES)
    HVD_TF_NAMING_ATTRS
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(first_dim_unknown)
    .Doc("Concatenates every rank's `tensor` along dimension 0 (which may differ by rank).");

REGISTER_OP("HorovodCppGroupedAllgather")
    .Attr("T: " HVD_TF_MOVE_TYPES)
    .Attr("N: int >= 1")
    HVD_TF_NAMING_ATTRS
    .Input("tensors: N * T")
    .Output("outputs: N * T")
    .SetShapeFn(first_dims_unknown)
    .Doc("Allgathers a list of tensors as one unit (negotiated and fused together).");

REGISTER_OP("HorovodCppBroadcast")
    .Attr("T: " HVD_TF_MOVE_TYPES)
    .Attr("root_rank: int")
    HVD_TF_NAMING_ATTRS
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc("Every rank receives `tensor` as it is on `root_rank` (a global rank).");

REGISTER_OP("HorovodCppAlltoall")
    .Attr("T: " HVD_TF_MOVE_TYPES)
    .Attr("Tsplits: {int32, int64} = DT_INT32")
    HVD_TF_NAMING_ATTRS
    .Input("tensor: T")
    .Input("splits: Tsplits")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(first_dim_unknown(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Sends splits[r] rows of `tensor` to rank r (empty splits: an even split); the output "
         "concatenates what every rank sent this one, received_splits the rows from each.");

REGISTER_OP("HorovodCppReducescatter")
    .Attr("T: " HVD_TF_TYPES)
    HVD_TF_REDUCE_ATTRS
    HVD_TF_NAMING_ATTRS
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(first_dim_unknown)
    .Doc("Reduces `tensor` across ranks (Sum or Average); each rank gets its slice of "
         "dimension 0 (the first dim0 % size ranks one row more).");

REGISTER_OP("HorovodCppGroupedReducescatter")
    .Attr("T: " HVD_TF_TYPES)
    .Attr("N: int >= 1")
    HVD_TF_REDUCE_ATTRS
    HVD_TF_NAMING_ATTRS
    .Input("tensors: N * T")
    .Output("outputs: N * T")
    .SetShapeFn(first_dims_unknown)
    .Doc("Reduce-scatters a list of tensors as one unit (negotiated and fused together).");

REGISTER_OP("HorovodCppJoin")
    .Output("last_joined_rank: int32")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc("This rank has no more steps; returns the last rank to join once every rank has.");

REGISTER_OP("HorovodCppBarrier")
    HVD_TF_PROCESS_SET_ATTR
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc("Completes once every rank of the process set has reached it.");

// clang-format on

}  // namespace hvd_tf
