// Copyright horovod_cpp authors. allreduce_async: the one native entry of an allreduce, for
// numpy arrays (horovod_cpp) and torch tensors (horovod_cpp.torch) alike; and
// grouped_allreduce_torch, the in-place grouped allreduce of plain torch tensors
// (DistributedOptimizer's buckets, horovod_cpp.torch's grouped_allreduce*).
//
// It runs once per tensor per step (DistributedOptimizer's hooks, workload d of
// docs/benchmarks.md), so it is a plain CPython METH_FASTCALL function (no pybind11
// dispatcher) that takes Horovod's arguments as the caller got them. The common case (a dense
// contiguous CPU tensor of a supported dtype, average None, op None or an int 0-4, name None or
// a str, scale factors floats or ints, the global process set) is read with a few C checks.
// Anything else goes through the package's own Python rules, given once by allreduce_setup
// (horovod_cpp._basics) and allreduce_setup_torch (horovod_cpp.torch), which normalise the
// argument or raise Horovod's error: each rule is written once, in Python, and no caller needs
// a second native entry to fall back on.
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"

namespace hvdpy {
namespace {

/// The Python rules the uncommon arguments go through (references never released: they
/// outlive the module).
struct Rules {
  PyObject* global_set = nullptr;       ///< horovod_cpp's global_process_set object
  PyObject* set_id = nullptr;           ///< _set_id(process_set) -> int, or its error
  PyObject* op_value = nullptr;         ///< _op_value(op) -> int 0-4, or its error
  PyObject* average_rule = nullptr;     ///< handle_average_backwards_compatibility(op, average)
  PyTypeObject* tensor_type = nullptr;  ///< torch.Tensor (subclasses match), once imported
  PyObject* check_tensor = nullptr;     ///< horovod_cpp.torch's _check_tensor(tensor)
  PyObject* copy_back = nullptr;        ///< copy_back(tensor, buf) -> finish(native) -> tensor
};

Rules& rules() {
  static Rules* r = new Rules();  // never freed: its references outlive the module
  return *r;
}

void replace(PyObject** slot, py::object value) {
  Py_XDECREF(*slot);
  *slot = value.release().ptr();
}

py::object call(PyObject* rule, const char* what, std::initializer_list<py::handle> args) {
  if (rule == nullptr) throw py::type_error(std::string("horovod_cpp: ") + what + " is not set up");
  py::tuple t(args.size());
  size_t i = 0;
  for (py::handle a : args) t[i++] = py::reinterpret_borrow<py::object>(a);
  PyObject* out = PyObject_Call(rule, t.ptr(), nullptr);
  if (out == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(out);
}

/// A scale factor: a float or an int read directly, anything else through float() (whose
/// TypeError/ValueError is Horovod's).
double scale_factor(PyObject* o) {
  if (PyFloat_CheckExact(o)) return PyFloat_AS_DOUBLE(o);
  if (PyLong_CheckExact(o)) {
    const double v = PyLong_AsDouble(o);  // OverflowError as float() raises it
    if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    return v;
  }
  PyObject* f = PyNumber_Float(o);
  if (f == nullptr) throw py::error_already_set();
  const double v = PyFloat_AS_DOUBLE(f);
  Py_DECREF(f);
  return v;
}

/// The op's integer value: an int 0-5 directly, anything else through _op_value (unknown
/// ops and bools as the package's rule decides).
int op_value(PyObject* op) {
  if (PyLong_CheckExact(op)) {
    const long v = PyLong_AsLong(op);
    if (v >= 0 && v <= static_cast<long>(hvd::ReduceOp::kAdasum)) return static_cast<int>(v);
    PyErr_Clear();
  }
  return call(rules().op_value, "the op rule", {op}).cast<int>();
}

/// The operation's name: None is "" (the core names it), a str as is, anything else str()'d.
std::string name_of(PyObject* name) {
  if (name == Py_None) return std::string();
  py::object s = PyUnicode_CheckExact(name) ? py::reinterpret_borrow<py::object>(name)
                                            : py::reinterpret_steal<py::object>(PyObject_Str(name));
  if (!s) throw py::error_already_set();
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(s.ptr(), &size);
  if (utf8 == nullptr) throw py::error_already_set();
  return std::string(utf8, static_cast<size_t>(size));
}

/// A torch tensor that is not the plain case: the view of it, or of a contiguous copy put in
/// *buf (a dense tensor that is not contiguous); sparse tensors, unsupported dtypes and devices
/// raise view_of's errors naming `role`.
hvd::TensorView torch_view_or_copy(py::handle t, const char* role, py::object* buf) {
  *buf = py::reinterpret_borrow<py::object>(t);
  if (!py::bool_(t.attr("is_sparse")) && !py::bool_(t.attr("is_contiguous")())) {
    *buf = t.attr("detach")().attr("contiguous")();
  }
  return view_of(*buf, true, role);
}

/// allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
/// average, torch_handle). output None: in place. torch_handle True: horovod_cpp.torch's call
/// (torch tensors only, returns an integer handle of handle_table.cc); False: a Handle object.
PyObject* allreduce_async(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_SetString(PyExc_TypeError, "allreduce_async() takes 9 arguments");
    return nullptr;
  }
  PyObject* const tensor = args[0];
  PyObject* const output = args[1];
  PyObject* op = args[3];
  PyObject* const process_set = args[6];
  PyObject* const average = args[7];
  const bool torch = args[8] == Py_True;
  const bool in_place = output == Py_None;
  const Rules& r = rules();
  try {
    hvd::TensorView in;
    bool plain = false;
    if (torch) {
      if (r.tensor_type == nullptr || !PyObject_TypeCheck(tensor, r.tensor_type)) {
        call(r.check_tensor, "the torch tensor rule", {tensor});
        throw py::type_error("allreduce input must be a torch.Tensor");
      }
      plain = torch_plain_view(tensor, &in);
      if (!plain) call(r.check_tensor, "the torch tensor rule", {tensor});  // its device rule
    }
    py::object op_holder;  // keeps the average rule's result alive
    if (average != Py_None) {
      op_holder = call(r.average_rule, "the average rule", {op, average});
      op = op_holder.ptr();
    }
    hvd::AllreduceOptions options;
    options.process_set =
        process_set_of(process_set == r.global_set || process_set == Py_None
                           ? 0
                           : call(r.set_id, "the process set rule", {process_set}).cast<int>());
    options.op = reduce_op_from_int(
        torch && op == Py_None ? static_cast<int>(hvd::ReduceOp::kAverage) : op_value(op));
    const std::string name = name_of(args[2]);
    options.prescale_factor = scale_factor(args[4]);
    options.postscale_factor = scale_factor(args[5]);

    py::object input = py::reinterpret_borrow<py::object>(tensor);  // what the library reads
    hvd::TensorView out;
    if (!torch) {
      in = view_of(tensor, in_place, "allreduce input");
      if (!in_place) out = view_of(output, true, "allreduce output");
    } else {
      if (!plain) in = torch_view_or_copy(tensor, "allreduce input", &input);
      if (!in_place && !torch_plain_view(output, &out)) {
        out = view_of(output, true, "allreduce output");
      }
    }
    hvd::Handle h;
    {
      py::gil_scoped_release nogil;
      h = hvd::allreduce_async(name, in, in_place ? in : out, options);
    }
    py::object given = py::reinterpret_borrow<py::object>(in_place ? tensor : output);
    if (!torch) {
      PyHandle handle(std::move(h), {input, py::reinterpret_borrow<py::object>(output)}, given,
                      ResultKind::kGiven);
      return py::cast(std::move(handle)).release().ptr();
    }
    if (in_place && input.ptr() != tensor) {  // reduced in a copy: copied back on synchronize
      py::object finish = call(r.copy_back, "the copy-back rule", {tensor, input});
      py::object native = py::cast(PyHandle(std::move(h), {input}, input, ResultKind::kGiven));
      return PyLong_FromLongLong(add_registered_handle(std::move(native), std::move(finish)));
    }
    return PyLong_FromLongLong(add_fast_handle(std::move(h), std::move(input), std::move(given)));
  } catch (...) {
    return raise_current_exception();
  }
}

/// Names of a group's tensors converted once (DistributedOptimizer's buckets): passed to
/// grouped_allreduce_torch by reference, so no std::string is built per tensor per call.
struct GroupNames {
  std::vector<std::string> names;
};

/// The names of a group of n tensors: a GroupNames as given, None as n empty names (the core
/// names them), a str s as "s.0" ... "s.<n-1>" (horovod_cpp._basics._group_names's rule).
const std::vector<std::string>& group_names(PyObject* names, size_t n,
                                            std::vector<std::string>* made) {
  if (names != Py_None && !PyUnicode_Check(names)) {
    const auto& given = py::cast<const GroupNames&>(py::handle(names)).names;
    if (given.size() != n) {
      throw py::value_error("grouped_allreduce: " + std::to_string(n) + " tensors but " +
                            std::to_string(given.size()) + " names");
    }
    return given;
  }
  made->resize(n);
  if (names != Py_None) {
    const std::string prefix = name_of(names) + ".";
    for (size_t i = 0; i < n; ++i) (*made)[i] = prefix + std::to_string(i);
  }
  return *made;
}

/// grouped_allreduce_torch(tensors, names, op, prescale_factor, postscale_factor, set_id):
/// the in-place grouped allreduce of a list or tuple of plain torch tensors (dense,
/// contiguous, CPU, supported dtype: torch_plain_view) with no Python work per tensor. op and
/// set_id are the ints the caller resolved. Returns an integer handle of handle_table.cc whose
/// result is the list of the tensors, or NotImplemented, submitting nothing, when some tensor
/// is not plain: the caller then takes its general path (copies, devices, Horovod's errors).
PyObject* grouped_allreduce_torch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "grouped_allreduce_torch() takes 6 arguments");
    return nullptr;
  }
  try {
    py::object list = py::reinterpret_steal<py::object>(PySequence_List(args[0]));
    if (!list) throw py::error_already_set();
    const Py_ssize_t n = PyList_GET_SIZE(list.ptr());
    if (n == 0) Py_RETURN_NOTIMPLEMENTED;  // the general path's error
    std::vector<hvd::TensorView> views(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!torch_plain_view(PyList_GET_ITEM(list.ptr(), i), &views[static_cast<size_t>(i)])) {
        Py_RETURN_NOTIMPLEMENTED;
      }
    }
    std::vector<std::string> made;
    const auto& names = group_names(args[1], views.size(), &made);
    hvd::AllreduceOptions options;
    options.op = reduce_op_from_int(op_value(args[2]));
    options.prescale_factor = scale_factor(args[3]);
    options.postscale_factor = scale_factor(args[4]);
    options.process_set = process_set_of(py::handle(args[5]).cast<int>());
    hvd::Handle h;
    {
      py::gil_scoped_release nogil;
      h = hvd::grouped_allreduce_async(names, views, options);
    }
    return PyLong_FromLongLong(add_fast_handle(std::move(h), list, list));
  } catch (...) {
    return raise_current_exception();
  }
}

PyMethodDef g_grouped_allreduce_torch = {
    "grouped_allreduce_torch",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&grouped_allreduce_torch)),
    METH_FASTCALL,
    "grouped_allreduce_torch(tensors, names, op, prescale_factor, postscale_factor, set_id)\n--"
    "\n\nReduces a list of dense contiguous CPU torch tensors in place as one unit; names: "
    "None, a str prefix or GroupNames. Returns an integer handle, or NotImplemented when a "
    "tensor is not such a tensor (nothing submitted)."};

PyMethodDef g_allreduce_async = {
    "allreduce_async",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&allreduce_async)), METH_FASTCALL,
    "allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set, "
    "average, torch_handle)\n--\n\nReduces `tensor` (a numpy array, or with torch_handle a "
    "torch tensor) across the ranks of process_set into `output` (None: in place), zero-copy. "
    "Returns a Handle, or with torch_handle an integer handle of horovod_cpp.torch."};

}  // namespace

void register_allreduce(py::module_& m) {
  m.def(
      "allreduce_setup",
      [](py::object global_set, py::object set_id, py::object op_value, py::object average_rule) {
        Rules& r = rules();
        replace(&r.global_set, std::move(global_set));
        replace(&r.set_id, std::move(set_id));
        replace(&r.op_value, std::move(op_value));
        replace(&r.average_rule, std::move(average_rule));
      },
      py::arg("global_process_set"), py::arg("set_id"), py::arg("op_value"),
      py::arg("average_rule"),
      "Gives allreduce_async the package's rules for process sets, ops and `average`.");
  m.def(
      "allreduce_setup_torch",
      [](py::object tensor_type, py::object check_tensor, py::object copy_back) {
        if (!PyType_Check(tensor_type.ptr())) throw py::type_error("tensor_type must be a type");
        Rules& r = rules();
        PyObject* type = reinterpret_cast<PyObject*>(r.tensor_type);
        replace(&type, std::move(tensor_type));
        r.tensor_type = reinterpret_cast<PyTypeObject*>(type);
        replace(&r.check_tensor, std::move(check_tensor));
        replace(&r.copy_back, std::move(copy_back));
      },
      py::arg("tensor_type"), py::arg("check_tensor"), py::arg("copy_back"),
      "Gives allreduce_async torch.Tensor and horovod_cpp.torch's tensor rules.");
  add_raw_function(m, &g_allreduce_async);
  py::class_<GroupNames>(m, "GroupNames",
                         "The names of a group's tensors, converted once for "
                         "grouped_allreduce_torch.")
      .def(py::init([](std::vector<std::string> names) { return GroupNames{std::move(names)}; }),
           py::arg("names"))
      .def("__len__", [](const GroupNames& g) { return g.names.size(); });
  add_raw_function(m, &g_grouped_allreduce_torch);
}

}  // namespace hvdpy
