// Copyright horovod_cpp authors. Collectives: each one views its Python buffers without
// copying, submits with the GIL released, and returns a Handle that keeps the buffers alive.
// `process_set` is the id of an hvd::ProcessSet (0: every rank); membership and existence are
// checked by the core (InvalidArgumentError, a ValueError).
#include "bindings.h"

namespace hvdpy {
namespace {

hvd::AllreduceOptions allreduce_options(int op, double prescale, double postscale, int set) {
  hvd::AllreduceOptions o;
  o.op = reduce_op_from_int(op);
  o.prescale_factor = prescale;
  o.postscale_factor = postscale;
  o.process_set = process_set_of(set);
  return o;
}

hvd::ReducescatterOptions reducescatter_options(int op, double prescale, double postscale,
                                                int set) {
  hvd::ReducescatterOptions o;
  o.op = reduce_op_from_int(op);
  o.prescale_factor = prescale;
  o.postscale_factor = postscale;
  o.process_set = process_set_of(set);
  return o;
}

/// Views of a list of read-only inputs, and references keeping them alive.
void view_list(py::list tensors, bool writable, const char* role,
               std::vector<hvd::TensorView>* views, std::vector<py::object>* keep) {
  for (py::handle t : tensors) {
    views->push_back(view_of(t, writable, role));
    keep->push_back(py::reinterpret_borrow<py::object>(t));
  }
}

PyHandle grouped_allreduce_async(py::list tensors, std::vector<std::string> names, int op,
                                 double prescale, double postscale, int set) {
  std::vector<hvd::TensorView> views;
  std::vector<py::object> keep;
  view_list(tensors, true, "grouped_allreduce tensor", &views, &keep);
  const auto options = allreduce_options(op, prescale, postscale, set);
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::grouped_allreduce_async(names, views, options);
  }
  return PyHandle(std::move(h), std::move(keep), tensors, ResultKind::kGiven);
}

PyHandle allgather_async(py::object input, const std::string& name, int set) {
  hvd::TensorView in = view_of(input, false, "allgather input");
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::allgather_async(name, in, process_set_of(set));
  }
  return PyHandle(std::move(h), {input}, py::none(), ResultKind::kLibrary);
}

PyHandle grouped_allgather_async(py::list tensors, std::vector<std::string> names, int set) {
  std::vector<hvd::TensorView> views;
  std::vector<py::object> keep;
  view_list(tensors, false, "grouped_allgather tensor", &views, &keep);
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::grouped_allgather_async(names, views, process_set_of(set));
  }
  return PyHandle(std::move(h), std::move(keep), py::none(), ResultKind::kLibraryList);
}

PyHandle broadcast_async(py::object tensor, int root_rank, const std::string& name, int set) {
  hvd::TensorView t = view_of(tensor, true, "broadcast tensor");
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::broadcast_async(name, t, root_rank, process_set_of(set));
  }
  return PyHandle(std::move(h), {tensor}, tensor, ResultKind::kGiven);
}

PyHandle alltoall_async(py::object input, std::vector<int64_t> splits, const std::string& name,
                        int set) {
  hvd::TensorView in = view_of(input, false, "alltoall input");
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::alltoall_async(name, in, splits, process_set_of(set));
  }
  return PyHandle(std::move(h), {input}, py::none(), ResultKind::kAlltoall);
}

PyHandle reducescatter_async(py::object input, const std::string& name, int op, double prescale,
                             double postscale, int set) {
  hvd::TensorView in = view_of(input, false, "reducescatter input");
  const auto options = reducescatter_options(op, prescale, postscale, set);
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::reducescatter_async(name, in, options);
  }
  return PyHandle(std::move(h), {input}, py::none(), ResultKind::kLibrary);
}

PyHandle grouped_reducescatter_async(py::list tensors, std::vector<std::string> names, int op,
                                     double prescale, double postscale, int set) {
  std::vector<hvd::TensorView> views;
  std::vector<py::object> keep;
  view_list(tensors, false, "grouped_reducescatter tensor", &views, &keep);
  const auto options = reducescatter_options(op, prescale, postscale, set);
  hvd::Handle h;
  {
    py::gil_scoped_release nogil;
    h = hvd::grouped_reducescatter_async(names, views, options);
  }
  return PyHandle(std::move(h), std::move(keep), py::none(), ResultKind::kLibraryList);
}

constexpr int kAverage = static_cast<int>(hvd::ReduceOp::kAverage);

}  // namespace

void register_collectives(py::module_& m) {
  m.def("grouped_allreduce_async", &grouped_allreduce_async, py::arg("tensors"),
        py::arg("names"), py::arg("op") = kAverage, py::arg("prescale_factor") = 1.0,
        py::arg("postscale_factor") = 1.0, py::arg("process_set") = 0,
        "Reduces a list of tensors in place as one negotiated, fused unit.");
  m.def("allgather_async", &allgather_async, py::arg("input"), py::arg("name") = "",
        py::arg("process_set") = 0,
        "Concatenates every rank's input along dim 0; result() is a new numpy array.");
  m.def("grouped_allgather_async", &grouped_allgather_async, py::arg("tensors"),
        py::arg("names"), py::arg("process_set") = 0,
        "Allgathers a list of tensors as one unit; result() is a list of new numpy arrays.");
  m.def("broadcast_async", &broadcast_async, py::arg("tensor"), py::arg("root_rank"),
        py::arg("name") = "", py::arg("process_set") = 0,
        "Replaces `tensor` by its value on root_rank (a global rank), in place.");
  m.def("alltoall_async", &alltoall_async, py::arg("input"),
        py::arg("splits") = std::vector<int64_t>(), py::arg("name") = "",
        py::arg("process_set") = 0,
        "Sends splits[r] rows of dim 0 to rank r (empty: even split); result() is "
        "(new numpy array, received splits).");
  m.def("reducescatter_async", &reducescatter_async, py::arg("input"), py::arg("name") = "",
        py::arg("op") = kAverage, py::arg("prescale_factor") = 1.0,
        py::arg("postscale_factor") = 1.0, py::arg("process_set") = 0,
        "Reduces (Sum/Average) and gives each rank its slice of dim 0 (the first dim0 % size "
        "ranks get one row more); result() is a new numpy array.");
  m.def("grouped_reducescatter_async", &grouped_reducescatter_async, py::arg("tensors"),
        py::arg("names"), py::arg("op") = kAverage, py::arg("prescale_factor") = 1.0,
        py::arg("postscale_factor") = 1.0, py::arg("process_set") = 0,
        "Reduce-scatters a list of tensors as one unit; result() is a list of new arrays.");
  m.def(
      "join",
      []() {
        py::gil_scoped_release nogil;
        return hvd::join();
      },
      "This rank has no more data: contributes zeros to other ranks' allreduces until every "
      "rank joined. Returns the last rank to join. Global set only.");
  m.def(
      "barrier",
      [](int set) {
        py::gil_scoped_release nogil;
        hvd::barrier(process_set_of(set));
      },
      py::arg("process_set") = 0);
}

}  // namespace hvdpy
