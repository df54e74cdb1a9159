// Copyright horovod_cpp authors. Python buffers <-> hvd::TensorView / hvd::Tensor, zero-copy.
#include <cstdint>

#include "bindings.h"

namespace hvdpy {
namespace {

[[noreturn]] void invalid(const std::string& what) { throw hvd::InvalidArgumentError(what); }

hvd::DataType numpy_dtype(const py::dtype& dt, const char* role) {
  // Read through Python attributes: pybind11 < 2.12 reads the dtype struct directly, whose
  // layout changed in numpy 2 (the TensorFlow environment has numpy 2).
  const char kind = dt.attr("kind").cast<std::string>()[0];
  const auto size = dt.attr("itemsize").cast<py::ssize_t>();
  const char order = dt.attr("byteorder").cast<std::string>()[0];
  if (order == '>') invalid(std::string(role) + ": big-endian arrays are not supported");
  switch (kind) {
    case 'b':
      if (size == 1) return hvd::DataType::kBool;
      break;
    case 'u':
      if (size == 1) return hvd::DataType::kUInt8;
      if (size == 2) return hvd::DataType::kUInt16;
      break;
    case 'i':
      if (size == 1) return hvd::DataType::kInt8;
      if (size == 2) return hvd::DataType::kInt16;
      if (size == 4) return hvd::DataType::kInt32;
      if (size == 8) return hvd::DataType::kInt64;
      break;
    case 'f':
      if (size == 2) return hvd::DataType::kFloat16;
      if (size == 4) return hvd::DataType::kFloat32;
      if (size == 8) return hvd::DataType::kFloat64;
      break;
    default:
      break;
  }
  invalid(std::string(role) + ": unsupported numpy dtype " + dt.attr("name").cast<std::string>() +
          " (supported: bool, uint8, int8, uint16, int16, int32, int64, float16, float32, float64)");
}

/// The DataType of a torch dtype name; false for a dtype horovod_cpp does not support.
bool torch_dtype_of(const std::string& name, hvd::DataType* out) {
  static const std::pair<const char*, hvd::DataType> kTable[] = {
      {"torch.uint8", hvd::DataType::kUInt8},     {"torch.int8", hvd::DataType::kInt8},
      {"torch.int16", hvd::DataType::kInt16},     {"torch.int32", hvd::DataType::kInt32},
      {"torch.int64", hvd::DataType::kInt64},     {"torch.float16", hvd::DataType::kFloat16},
      {"torch.bfloat16", hvd::DataType::kBFloat16}, {"torch.float32", hvd::DataType::kFloat32},
      {"torch.float64", hvd::DataType::kFloat64}, {"torch.bool", hvd::DataType::kBool}};
  for (const auto& [n, dt] : kTable) {
    if (name == n) {
      *out = dt;
      return true;
    }
  }
  return false;
}

hvd::DataType torch_dtype(const std::string& name, const char* role) {
  hvd::DataType dt;
  if (torch_dtype_of(name, &dt)) return dt;
  invalid(std::string(role) + ": unsupported torch dtype " + name +
          " (supported: bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, "
          "float64)");
}

hvd::TensorView numpy_view(const py::array& a, bool writable, const char* role) {
  if (!(a.flags() & py::array::c_style)) {
    invalid(std::string(role) + ": the array must be C-contiguous (use numpy.ascontiguousarray)");
  }
  // The reductions read and write whole elements: an array at an address that is not a
  // multiple of its element size (numpy.frombuffer at an odd offset) is refused.
  constexpr int kNpyArrayAligned = 0x0100;  // NPY_ARRAY_ALIGNED
  if (!(a.flags() & kNpyArrayAligned)) {
    invalid(std::string(role) + ": the array is not aligned for its dtype (copy it: a.copy())");
  }
  if (writable && !a.writeable()) invalid(std::string(role) + ": the array is read-only");
  hvd::TensorView v;
  v.dtype = numpy_dtype(a.dtype(), role);
  v.data = const_cast<void*>(a.data());
  v.shape.reserve(static_cast<size_t>(a.ndim()));
  for (py::ssize_t i = 0; i < a.ndim(); ++i) v.shape.push_back(static_cast<int64_t>(a.shape(i)));
  v.device = hvd::Device::cpu();
  return v;
}

/// torch.cuda.current_stream(index).cuda_stream: the stream whose queued work produced a CUDA
/// tensor's data, as far as the caller knows (Horovod's ordering: the collective runs after
/// the work queued on torch's current stream). Null is the legacy default stream.
void* current_cuda_stream(int index) {
  static py::object* current_stream = nullptr;  // never freed: outlives the interpreter
  if (current_stream == nullptr) {
    current_stream = new py::object(py::module_::import("torch.cuda").attr("current_stream"));
  }
  py::object s = (*current_stream)(index);
  return reinterpret_cast<void*>(s.attr("cuda_stream").cast<std::uintptr_t>());
}

hvd::TensorView torch_view(py::handle t, const char* role) {
  if (t.attr("is_sparse").cast<bool>()) {
    invalid(std::string(role) + ": sparse tensors are not supported here (densify them, or use "
            "sparse_allreduce_async)");
  }
  hvd::TensorView v;
  v.dtype = torch_dtype(py::str(t.attr("dtype")).cast<std::string>(), role);
  py::object device = t.attr("device");
  const std::string dev_type = device.attr("type").cast<std::string>();
  if (dev_type == "cpu") {
    v.device = hvd::Device::cpu();
  } else if (dev_type == "cuda") {
    py::object index = device.attr("index");
    v.device = hvd::Device::cuda(index.is_none() ? 0 : index.cast<int>());
    v.stream = current_cuda_stream(v.device.index);
  } else {
    invalid(std::string(role) + ": tensors on device '" + dev_type + "' are not supported");
  }
  if (!t.attr("is_contiguous")().cast<bool>()) {
    invalid(std::string(role) + ": the tensor must be contiguous (use .contiguous())");
  }
  v.data = reinterpret_cast<void*>(t.attr("data_ptr")().cast<std::uintptr_t>());
  for (py::handle d : t.attr("shape")) v.shape.push_back(d.cast<int64_t>());
  return v;
}

/// True for a torch.Tensor (or a subclass, e.g. torch.nn.Parameter). A type check, not duck
/// typing: an object that merely has data_ptr(), dtype and shape would otherwise hand the
/// library any address to read and write. torch is never imported here: when the program
/// has not imported it, nothing it passes can be a tensor.
bool is_torch_tensor(py::handle obj) {
  static PyTypeObject* tensor_type = nullptr;  // referenced for ever once found
  if (tensor_type == nullptr) {
    PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
    if (torch == nullptr) return false;
    PyObject* t = PyObject_GetAttrString(torch, "Tensor");
    if (t == nullptr || !PyType_Check(t)) {
      PyErr_Clear();
      Py_XDECREF(t);
      return false;
    }
    tensor_type = reinterpret_cast<PyTypeObject*>(t);
  }
  return PyObject_TypeCheck(obj.ptr(), tensor_type);
}

// ---- the per-call fast path of horovod_cpp.torch ------------------------------------------
/// Attribute names read on every call, interned once.
struct TorchNames {
  PyObject* is_cpu = PyUnicode_InternFromString("is_cpu");
  PyObject* is_sparse = PyUnicode_InternFromString("is_sparse");
  PyObject* is_contiguous = PyUnicode_InternFromString("is_contiguous");
  PyObject* dtype = PyUnicode_InternFromString("dtype");
  PyObject* data_ptr = PyUnicode_InternFromString("data_ptr");
  PyObject* shape = PyUnicode_InternFromString("shape");
};

const TorchNames& torch_names() {
  static const TorchNames* names = new TorchNames();  // never freed: outlives the interpreter
  return *names;
}

py::object steal_or_throw(PyObject* o) {
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

py::object attr_of(py::handle obj, PyObject* name) {
  return steal_or_throw(PyObject_GetAttr(obj.ptr(), name));
}

py::object call_method0(py::handle obj, PyObject* name) {
  // Vectorcall: no bound-method object is made for the call. args[0] is the spare slot that
  // PY_VECTORCALL_ARGUMENTS_OFFSET lets the callee use.
  PyObject* args[2] = {nullptr, obj.ptr()};
  return steal_or_throw(
      PyObject_VectorcallMethod(name, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
}

/// torch.dtype object -> DataType, false for an unsupported dtype (not cached: such tensors go
/// through view_of(), which raises). torch's dtype objects are singletons, so a handful of
/// pointers (each kept referenced) answer every call.
bool lookup_torch_dtype(py::handle dtype, hvd::DataType* out) {
  static auto* cache = new std::vector<std::pair<PyObject*, hvd::DataType>>();
  for (const auto& entry : *cache) {
    if (entry.first == dtype.ptr()) {
      *out = entry.second;
      return true;
    }
  }
  if (!torch_dtype_of(py::str(dtype).cast<std::string>(), out)) return false;
  cache->emplace_back(dtype.inc_ref().ptr(), *out);
  return true;
}

/// shape of a torch tensor (a torch.Size, i.e. a tuple of ints) into `out`.
void read_shape(py::handle shape, hvd::Shape* out) {
  if (!PyTuple_Check(shape.ptr())) {
    for (py::handle d : shape) out->push_back(d.cast<int64_t>());
    return;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(shape.ptr());
  out->reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), i));
    if (d == -1 && PyErr_Occurred()) throw py::error_already_set();
    out->push_back(static_cast<int64_t>(d));
  }
}

const char* numpy_format(hvd::DataType dt) {
  switch (dt) {
    case hvd::DataType::kUInt8: return "uint8";
    case hvd::DataType::kInt8: return "int8";
    case hvd::DataType::kInt16: return "int16";
    case hvd::DataType::kUInt16: return "uint16";
    case hvd::DataType::kInt32: return "int32";
    case hvd::DataType::kInt64: return "int64";
    case hvd::DataType::kFloat16: return "float16";
    case hvd::DataType::kBFloat16: return "int16";  // raw bits; numpy has no bfloat16
    case hvd::DataType::kFloat32: return "float32";
    case hvd::DataType::kFloat64: return "float64";
    case hvd::DataType::kBool: return "bool";
  }
  return "uint8";
}

}  // namespace

hvd::TensorView view_of(py::handle obj, bool writable, const char* role) {
  if (py::isinstance<py::array>(obj)) {
    return numpy_view(py::reinterpret_borrow<py::array>(obj), writable, role);
  }
  if (is_torch_tensor(obj)) return torch_view(obj, role);
  throw py::type_error(std::string(role) + ": expected a numpy.ndarray or a torch.Tensor, got " +
                       std::string(Py_TYPE(obj.ptr())->tp_name));
}

namespace {
// The data pointer and shape of a dense, contiguous CPU tensor.
void read_cpu_contiguous(py::handle t, const TorchNames& n, hvd::TensorView* v) {
  py::object ptr = call_method0(t, n.data_ptr);
  v->data = PyLong_AsVoidPtr(ptr.ptr());
  if (v->data == nullptr && PyErr_Occurred()) throw py::error_already_set();
  v->shape.clear();
  read_shape(attr_of(t, n.shape), &v->shape);
  v->device = hvd::Device::cpu();
}
}  // namespace

bool torch_plain_view(py::handle t, hvd::TensorView* v) {
  const TorchNames& n = torch_names();
  if (!is_torch_tensor(t) || attr_of(t, n.is_cpu).ptr() != Py_True ||
      attr_of(t, n.is_sparse).ptr() != Py_False ||
      call_method0(t, n.is_contiguous).ptr() != Py_True ||
      !lookup_torch_dtype(attr_of(t, n.dtype), &v->dtype)) {
    return false;
  }
  read_cpu_contiguous(t, n, v);
  return true;
}

py::array to_numpy(const hvd::Tensor& t) {
  auto* owner = new hvd::Tensor(t);  // shares the storage; freed with the array
  py::capsule base(owner, [](void* p) { delete static_cast<hvd::Tensor*>(p); });
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  // Explicit C strides (numpy 2 safe, see numpy_dtype()).
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(hvd::dtype_size(t.dtype()));
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return py::array(py::dtype(numpy_format(t.dtype())), shape, strides, owner->data(), base);
}

hvd::ReduceOp reduce_op_from_int(int op) {
  switch (op) {
    case 0: return hvd::ReduceOp::kSum;
    case 1: return hvd::ReduceOp::kAverage;
    case 2: return hvd::ReduceOp::kMin;
    case 3: return hvd::ReduceOp::kMax;
    case 4: return hvd::ReduceOp::kProduct;
    case 5: return hvd::ReduceOp::kAdasum;
    default: break;
  }
  invalid("unknown reduction op " + std::to_string(op));
}

void register_tensors(py::module_& m) {
  m.attr("Sum") = static_cast<int>(hvd::ReduceOp::kSum);
  m.attr("Average") = static_cast<int>(hvd::ReduceOp::kAverage);
  m.attr("Min") = static_cast<int>(hvd::ReduceOp::kMin);
  m.attr("Max") = static_cast<int>(hvd::ReduceOp::kMax);
  m.attr("Product") = static_cast<int>(hvd::ReduceOp::kProduct);
  m.attr("Adasum") = static_cast<int>(hvd::ReduceOp::kAdasum);
  m.def(
      "dtype_name",
      [](py::handle obj) { return std::string(hvd::dtype_name(view_of(obj, false, "tensor").dtype)); },
      py::arg("tensor"), "The horovod_cpp dtype name of a numpy array or torch tensor.");
}

}  // namespace hvdpy
