// Copyright horovod_cpp authors. hvd::Error -> Python exceptions.
//
// Local misuse (detected on this rank before any communication) is a ValueError; a collective
// that failed across ranks is a HorovodInternalError, which is a RuntimeError like Horovod's.
#include "bindings.h"

namespace hvdpy {
namespace {

// Created once at import and never freed (they live as long as the interpreter).
PyObject* g_internal = nullptr;
PyObject* g_mismatch = nullptr;
PyObject* g_shutdown = nullptr;
PyObject* g_backend = nullptr;
PyObject* g_invalid = nullptr;
PyObject* g_not_init = nullptr;
PyObject* g_timeout = nullptr;

PyObject* make(py::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string full = std::string("horovod_cpp.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(full.c_str(), doc, base, nullptr);
  if (type == nullptr) throw py::error_already_set();
  Py_INCREF(type);
  m.add_object(name, py::handle(type));
  return type;
}

}  // namespace

void register_errors(py::module_& m) {
  g_internal = make(m, "HorovodInternalError", PyExc_RuntimeError,
                    "A collective failed across ranks (mismatch, shutdown, backend failure).");
  g_mismatch = make(m, "MismatchError", g_internal,
                    "Ranks disagreed on a collective (shape, dtype, op, root, ...).");
  g_shutdown = make(m, "ShutdownError", g_internal,
                    "The runtime shut down before the operation completed.");
  g_backend = make(m, "BackendError", g_internal, "MPI reported a failure.");
  g_invalid = make(m, "InvalidArgumentError", PyExc_ValueError,
                   "Local misuse detected on this rank; the tensor is still sent, marked failed, so the "
                   "other ranks' matching call fails with a MismatchError naming this rank.");
  g_not_init = make(m, "NotInitializedError", PyExc_ValueError,
                    "horovod_cpp used before init() or after shutdown().");
  g_timeout = make(m, "HorovodTimeoutError", PyExc_TimeoutError,
                   "A wait with a timeout expired; the operation goes on.");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hvd::Error& e) {
      PyObject* type = g_internal;
      switch (e.code()) {
        case hvd::ErrorCode::kNotInitialized: type = g_not_init; break;
        case hvd::ErrorCode::kInvalidArgument: type = g_invalid; break;
        case hvd::ErrorCode::kMismatch: type = g_mismatch; break;
        case hvd::ErrorCode::kShutdown: type = g_shutdown; break;
        case hvd::ErrorCode::kTimeout: type = g_timeout; break;
        case hvd::ErrorCode::kBackend: type = g_backend; break;
        case hvd::ErrorCode::kInternal: break;  // a lost peer: HorovodInternalError itself
        case hvd::ErrorCode::kOk: break;
      }
      PyErr_SetString(type, e.what());
    }
  });
}

PyObject* raise_current_exception() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    // The translators pybind11's own dispatcher applies (register_errors()'s among them).
    if (!py::detail::apply_exception_translators(
            py::detail::get_local_internals().registered_exception_translators) &&
        !py::detail::apply_exception_translators(
            py::detail::get_internals().registered_exception_translators)) {
      PyErr_SetString(PyExc_SystemError, "horovod_cpp: an unknown C++ exception escaped");
    }
  }
  return nullptr;
}

}  // namespace hvdpy
