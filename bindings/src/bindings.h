// Copyright horovod_cpp authors. Shared declarations of the pybind11 module horovod_cpp._C.
//
// The module is a thin layer over the public C++ API (horovod_cpp/horovod_cpp.h): it turns
// Python buffers (numpy arrays, CPU torch tensors) into hvd::TensorView without copying,
// forwards to hvd::..., releases the GIL while the library works or waits, and maps hvd::Error
// to Python exceptions. One file per area: errors, tensors, init/topology, handles, collectives.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"

namespace hvdpy {

namespace py = pybind11;

void register_errors(py::module_& m);
void register_tensors(py::module_& m);
void register_init_topology(py::module_& m);
void register_handles(py::module_& m);
void register_collectives(py::module_& m);
void register_process_sets(py::module_& m);
void register_handle_table(py::module_& m);
void register_allreduce(py::module_& m);

// ---- errors.cc ---------------------------------------------------------------------------
/// For plain CPython functions (allreduce.cc, handle_table.cc), called inside a catch block:
/// sets the Python error of the exception being handled exactly as a pybind11 function would
/// (hvd::Error by its code, py::error_already_set restored) and returns nullptr.
PyObject* raise_current_exception();

/// Adds `def` (static storage) to `m` as a plain CPython function: no pybind11 dispatcher, for
/// the calls made once per tensor per step.
inline void add_raw_function(py::module_& m, PyMethodDef* def) {
  PyObject* f = PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr());
  if (f == nullptr) throw py::error_already_set();
  m.add_object(def->ml_name, py::reinterpret_steal<py::object>(f));
}

// ---- tensors.cc --------------------------------------------------------------------------
/// A view of the memory of `obj`: a C-contiguous, aligned numpy array, or a contiguous
/// torch.Tensor (an instance of the type, or a subclass; no libtorch is linked: its
/// data_ptr(), dtype and shape are read through Python) on the CPU or a CUDA device (a CUDA
/// view carries torch.cuda.current_stream() of its device, which the collective waits on). No
/// copy is made: `obj` must stay alive until the collective completes (the PyHandle keeps it).
/// Throws ValueError (InvalidArgumentError) for a non-contiguous, unaligned, read-only (when
/// `writable`) or unsupported-dtype buffer, TypeError for an object that is neither.
hvd::TensorView view_of(py::handle obj, bool writable, const char* role);

/// The per-call view of horovod_cpp.torch: `t` read with six interned attribute lookups and a
/// cached dtype table when it is a dense, contiguous CPU torch tensor of a supported dtype;
/// false, viewing nothing and raising nothing, for any other tensor (view_of() then decides).
bool torch_plain_view(py::handle t, hvd::TensorView* v);

/// A numpy array sharing the storage of `t` (kept alive by the array). bfloat16, which numpy
/// lacks, comes back as int16 holding the raw bits.
py::array to_numpy(const hvd::Tensor& t);

// ---- dlpack_export.cc ---------------------------------------------------------------------
/// A result of the library for Python: a numpy array (to_numpy) for a CPU tensor; for a CUDA
/// tensor the tuple (capsule, shape, device index), where capsule is a DLPack "dltensor"
/// capsule sharing the device memory (torch.utils.dlpack.from_dlpack takes it without a copy)
/// or None when the tensor has no elements.
py::object to_python(const hvd::Tensor& t);

/// ReduceOp from its integer value (kSum=0 ... kProduct=4, kAdasum=5); ValueError otherwise.
hvd::ReduceOp reduce_op_from_int(int op);

/// hvd::ProcessSet from its id (0: the global set). Unknown ids are reported by the core.
inline hvd::ProcessSet process_set_of(int id) { return hvd::ProcessSet{id}; }

// ---- handles.cc --------------------------------------------------------------------------
/// What PyHandle::result() returns.
enum class ResultKind {
  kGiven,        ///< the object the caller passed as output (in place: the input)
  kLibrary,      ///< the tensor the library allocated, as a numpy array (allgather, ...)
  kLibraryList,  ///< every tensor the library allocated, a list of numpy arrays (grouped)
  kAlltoall,     ///< (output array, received splits as an int64 array)
};

/// The Python face of hvd::Handle. Keeps the Python objects whose memory the operation reads
/// or writes alive until it completes.
class PyHandle {
 public:
  PyHandle(hvd::Handle handle, std::vector<py::object> keep_alive, py::object output,
           ResultKind kind);
  PyHandle(const PyHandle&) = delete;
  PyHandle& operator=(const PyHandle&) = delete;
  PyHandle(PyHandle&&) = default;
  ~PyHandle();

  bool poll() const;
  /// Waits (GIL released); timeout in seconds or None. Rethrows the operation's error.
  void wait(py::object timeout);
  /// Waits, then returns the output: the array the library allocated (allgather, alltoall,
  /// reducescatter), a list of them (grouped allgather/reducescatter), (array, received
  /// splits) for alltoall, or the object the caller passed as output (in place: the input).
  py::object result();
  /// Alltoall: rows received from each rank (waits first).
  std::vector<int64_t> received_splits();
  std::string name() const { return handle_.name(); }
  int error_code() const { return static_cast<int>(handle_.error_code()); }
  std::string error_message() const { return handle_.error_message(); }

 private:
  hvd::Handle handle_;
  std::vector<py::object> keep_alive_;
  py::object output_;
  ResultKind kind_;
};

// ---- handle_table.cc ----------------------------------------------------------------------
/// Stores an operation submitted by allreduce_async in the table of integer handles of
/// horovod_cpp.torch and returns its id: `keep` stays alive until it completes, `result` is
/// what synchronize() returns.
long long add_fast_handle(hvd::Handle handle, py::object keep, py::object result);

/// Stores a Handle object and finish(handle) -> output in the same table; returns the id.
long long add_registered_handle(py::object native, py::object finish);

}  // namespace hvdpy
