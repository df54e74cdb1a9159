// Copyright horovod_cpp authors. Collectives: each one views its Python buffers without
// copying, submits with the GIL released, and returns a Handle that keeps the buffers alive.
//
// Adding a collective of the core (alltoall, reducescatter, ...) is one m.def here plus its
// Python wrapper, which looks the function up on this module (horovod_cpp/_ops.py).
#include "bindings.h"

namespace hvdpy {
namespace {

hvd::AllreduceOptions allreduce_options(int op, double prescale, double postscale) {
  hvd::AllreduceOptions o;
  o.op = reduce_op_from_int(op);
  o.prescale_factor = prescale;
  o.postscale_factor = postscale;
  return o;
}

PyHandle allreduce_async(py::object input, py::object output, const std::string& name, int op,
                         double prescale, double postscale) {
  const bool in_place = output.is_none();
  hvd::TensorView in = view_of(input, in_place, "allreduce input");
  hvd::TensorView out = in_place ? in : view_of(output, true, "allreduce output");
  const auto options = allreduce_options(op, prescale, postscale);
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::allreduce_async(name, in, out, options);
  }
  py::object result = in_place ? input : output;
  return PyHandle(std::move(h), {input, output}, result, false);
}

PyHandle grouped_allreduce_async(py::list tensors, std::vector<std::string> names, int op,
                                 double prescale, double postscale) {
  std::vector<hvd::TensorView> views;
  std::vector<py::object> keep;
  for (py::handle t : tensors) {
    views.push_back(view_of(t, true, "grouped_allreduce tensor"));
    keep.push_back(py::reinterpret_borrow<py::object>(t));
  }
  const auto options = allreduce_options(op, prescale, postscale);
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::grouped_allreduce_async(names, views, options);
  }
  return PyHandle(std::move(h), std::move(keep), tensors, false);
}

PyHandle allgather_async(py::object input, const std::string& name) {
  hvd::TensorView in = view_of(input, false, "allgather input");
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::allgather_async(name, in);
  }
  return PyHandle(std::move(h), {input}, py::none(), true);
}

PyHandle broadcast_async(py::object tensor, int root_rank, const std::string& name) {
  hvd::TensorView t = view_of(tensor, true, "broadcast tensor");
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::broadcast_async(name, t, root_rank);
  }
  return PyHandle(std::move(h), {tensor}, tensor, false);
}

}  // namespace

void register_collectives(py::module_& m) {
  m.def("allreduce_async", &allreduce_async, py::arg("input"), py::arg("output") = py::none(),
        py::arg("name") = "", py::arg("op") = static_cast<int>(hvd::ReduceOp::kAverage),
        py::arg("prescale_factor") = 1.0, py::arg("postscale_factor") = 1.0,
        "Reduces `input` across ranks into `output` (None: in place). Zero-copy.");
  m.def("grouped_allreduce_async", &grouped_allreduce_async, py::arg("tensors"),
        py::arg("names"), py::arg("op") = static_cast<int>(hvd::ReduceOp::kAverage),
        py::arg("prescale_factor") = 1.0, py::arg("postscale_factor") = 1.0,
        "Reduces a list of tensors in place as one negotiated, fused unit.");
  m.def("allgather_async", &allgather_async, py::arg("input"), py::arg("name") = "",
        "Concatenates every rank's input along dim 0; result() is a new numpy array.");
  m.def("broadcast_async", &broadcast_async, py::arg("tensor"), py::arg("root_rank"),
        py::arg("name") = "", "Replaces `tensor` by its value on root_rank, in place.");
  m.def("barrier", []() {
    py::gil_scoped_release nogil;
    hvd::barrier();
  });
}

}  // namespace hvdpy
