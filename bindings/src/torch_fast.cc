// Copyright horovod_cpp authors. horovod_cpp.torch's allreduce_async_ as one plain CPython call.
//
// allreduce_async_ runs once per tensor per step (DistributedOptimizer's hooks, workload d of
// docs/benchmarks.md), so its common case skips both the Python-level argument handling and
// pybind11's dispatcher: torch_allreduce_async_fast takes horovod.torch's seven arguments as
// given and, when they are the plain case (a dense contiguous CPU tensor of a supported dtype;
// average None; op None or an int 0-4; name None or a str; the scale factors floats or ints;
// the global process set), submits the in-place allreduce and returns its integer handle.
// Otherwise it returns 0 having done nothing, and the caller takes the general Python path,
// which owns every check and error message of horovod.torch.
#include "bindings.h"

namespace hvdpy {
namespace {

/// What the fast path compares against, set once by torch_fast_setup (mpi_ops.py's import).
struct FastState {
  PyTypeObject* tensor_type = nullptr;  ///< torch.Tensor (subclasses, e.g. Parameter, match)
  PyObject* global_set = nullptr;       ///< horovod_cpp's global_process_set object
};

FastState& fast_state() {
  static FastState* s = new FastState();  // never freed: its references outlive the module
  return *s;
}

/// A float or an int (not a bool, nor a subclass) as a double; false for anything else.
bool plain_number(PyObject* o, double* out) {
  if (PyFloat_CheckExact(o)) {
    *out = PyFloat_AS_DOUBLE(o);
    return true;
  }
  if (PyLong_CheckExact(o)) {
    *out = PyLong_AsDouble(o);
    if (*out == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();  // too large: the general path decides
      return false;
    }
    return true;
  }
  return false;
}

PyObject* general_path() { return PyLong_FromLong(0); }

/// torch_allreduce_async_fast(tensor, average, name, op, prescale_factor, postscale_factor,
/// process_set) -> integer handle, or 0: not the plain case, nothing submitted.
PyObject* allreduce_async_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError, "torch_allreduce_async_fast() takes 7 arguments");
    return nullptr;
  }
  PyObject* const tensor = args[0];
  PyObject* const name = args[2];
  PyObject* const op = args[3];
  const FastState& st = fast_state();
  if (st.tensor_type == nullptr || args[1] != Py_None || args[6] != st.global_set ||
      !PyObject_TypeCheck(tensor, st.tensor_type)) {
    return general_path();
  }
  int op_value = static_cast<int>(hvd::ReduceOp::kAverage);
  if (op != Py_None) {
    if (!PyLong_CheckExact(op)) return general_path();
    const long v = PyLong_AsLong(op);
    if (v < 0 || v > static_cast<long>(hvd::ReduceOp::kProduct)) {
      PyErr_Clear();
      return general_path();
    }
    op_value = static_cast<int>(v);
  }
  const char* name_utf8 = "";
  Py_ssize_t name_size = 0;
  if (name != Py_None) {
    if (!PyUnicode_CheckExact(name)) return general_path();
    name_utf8 = PyUnicode_AsUTF8AndSize(name, &name_size);
    if (name_utf8 == nullptr) return nullptr;  // e.g. lone surrogates: str() gives the same
  }
  hvd::AllreduceOptions options;
  if (!plain_number(args[4], &options.prescale_factor) ||
      !plain_number(args[5], &options.postscale_factor)) {
    return general_path();
  }
  try {
    options.op = reduce_op_from_int(op_value);
    options.process_set = process_set_of(0);
    hvd::TensorView view;
    if (!torch_plain_view(tensor, &view)) return general_path();
    std::string op_name(name_utf8, static_cast<size_t>(name_size));
    hvd::Handle h;
    {
      py::gil_scoped_release nogil;
      h = hvd::allreduce_async(op_name, view, view, options);
    }
    auto keep = py::reinterpret_borrow<py::object>(tensor);
    return PyLong_FromLongLong(add_fast_handle(std::move(h), keep, keep));
  } catch (...) {
    return raise_current_exception();
  }
}

PyMethodDef g_allreduce_async_fast = {
    "torch_allreduce_async_fast", reinterpret_cast<PyCFunction>(&allreduce_async_fast),
    METH_FASTCALL,
    "torch_allreduce_async_fast(tensor, average, name, op, prescale_factor, postscale_factor, "
    "process_set)\n--\n\nhorovod_cpp.torch.allreduce_async_'s plain case in one call: the "
    "integer handle of the submitted in-place allreduce, or 0 (nothing submitted) when the "
    "arguments are not the plain case and the general path must handle them."};

}  // namespace

void register_torch_fast(py::module_& m) {
  m.def(
      "torch_fast_setup",
      [](py::object tensor_type, py::object global_set) {
        if (!PyType_Check(tensor_type.ptr())) throw py::type_error("tensor_type must be a type");
        FastState& st = fast_state();
        Py_XDECREF(reinterpret_cast<PyObject*>(st.tensor_type));
        Py_XDECREF(st.global_set);
        st.tensor_type = reinterpret_cast<PyTypeObject*>(tensor_type.release().ptr());
        st.global_set = global_set.release().ptr();
      },
      py::arg("tensor_type"), py::arg("global_process_set"),
      "Gives torch_allreduce_async_fast torch.Tensor and the global process set object.");
  add_raw_function(m, &g_allreduce_async_fast);
}

}  // namespace hvdpy
