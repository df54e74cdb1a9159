// Copyright horovod_cpp authors. The integer handles of horovod_cpp.torch.
//
// horovod.torch hands out integer handles. They live in one table here, keyed by id, so that
// the per-call path creates no Python handle object and no Python closure: an entry submitted
// by the fast path holds the core's hvd::Handle, the tensors it reads and writes, and the
// object synchronize() returns; an entry registered from Python (the general path: grouped
// collectives, allgather, non-contiguous in-place tensors, ...) holds a Handle object and the
// callable that turns it into the output. The table is only touched with the GIL held.
#include <chrono>
#include <cmath>
#include <exception>
#include <unordered_map>
#include <utility>

#include "bindings.h"

namespace hvdpy {
namespace {

/// One operation in flight.
struct Pending {
  hvd::Handle handle;  ///< fast path: the core's handle (invalid for registered entries)
  py::object keep;     ///< fast path: the input, kept alive until the operation completes
  py::object result;   ///< fast path: what synchronize() returns (the output tensor)
  py::object native;   ///< registered entry: the Handle object (None on the fast path)
  py::object finish;   ///< registered entry: finish(native) -> output
  /// fast path: the storages of the input and (when another tensor) the output. The tensor
  /// objects alone do not keep the memory the operation reads and writes: set_() or
  /// `.data =` in flight points a tensor at other storage and would free this one.
  py::object keep_storage, result_storage;
};

/// The storage object of the torch tensor `t`: untyped_storage() (torch >= 2), _storage()
/// (1.13), chosen at the first call. None when `t` has none to give (a tensor subclass
/// without storage): the entry then keeps the tensor object only, as before.
py::object storage_of(py::handle t) {
  static PyObject* name = nullptr;  // interned, never freed
  if (name == nullptr) {
    name = PyUnicode_InternFromString(
        PyObject_HasAttrString(t.ptr(), "untyped_storage") ? "untyped_storage" : "_storage");
  }
  PyObject* args[2] = {nullptr, t.ptr()};
  PyObject* s =
      PyObject_VectorcallMethod(name, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  if (s == nullptr) {
    PyErr_Clear();
    return py::none();
  }
  return py::reinterpret_steal<py::object>(s);
}

class HandleTable {
 public:
  /// Stores `p` under a new id (ids start at 1 and are never reused).
  long long add(Pending p) {
    const long long id = next_id_++;
    entries_.emplace(id, std::move(p));
    return id;
  }

  /// The entry of `id`, or nullptr.
  const Pending* find(long long id) const {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second;
  }

  /// Removes and returns the entry of `id`; false when there is none.
  bool take(long long id, Pending* out) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return false;
    *out = std::move(it->second);
    entries_.erase(it);
    return true;
  }

  size_t size() const { return entries_.size(); }

  /// At interpreter exit: drops what is done; leaks the references of operations that may
  /// still write their buffers (as PyHandle's destructor does) rather than free that memory.
  void clear_at_exit() {
    for (auto& [id, p] : entries_) {
      if (p.handle.valid() && !p.handle.poll()) {
        p.keep.release();
        p.result.release();
        p.keep_storage.release();
        p.result_storage.release();
      }
    }
    entries_.clear();
  }

 private:
  std::unordered_map<long long, Pending> entries_;
  long long next_id_ = 1;
};

HandleTable& table() {
  static HandleTable* t = new HandleTable();  // never destroyed: emptied at interpreter exit
  return *t;
}

/// The id of a Python handle, or false for anything that is not an int.
bool id_of(py::handle h, long long* id) {
  if (!PyLong_Check(h.ptr())) return false;
  const long long v = PyLong_AsLongLong(h.ptr());
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();  // out of range: no such handle
    return false;
  }
  *id = v;
  return true;
}

bool is_done(const Pending& p) {
  if (p.handle.valid()) return p.handle.poll();
  return p.native.attr("poll")().cast<bool>();
}

/// Waits for a fast-path entry; the GIL is released only when it still has to wait.
void wait_fast(const hvd::Handle& h) {
  if (!h.poll()) {
    py::gil_scoped_release nogil;
    h.wait();
    return;
  }
  h.wait();  // done: rethrows the operation's error, if any
}

/// The output of an entry already taken out of the table (waits first).
py::object finish(Pending& p) {
  if (p.handle.valid()) {
    wait_fast(p.handle);
    return std::move(p.result);
  }
  p.native.attr("wait")();
  return p.finish(p.native);
}

py::object synchronize(py::handle handle) {
  long long id = 0;
  Pending p;
  if (!id_of(handle, &id) || !table().take(id, &p)) return py::none();
  return finish(p);
}

py::object poll(py::handle handle) {
  long long id = 0;
  if (!id_of(handle, &id)) return py::none();
  const Pending* p = table().find(id);
  if (p == nullptr) return py::none();
  return py::bool_(is_done(*p));
}

/// Whether the operation of an integer handle has completed after waiting up to `seconds`
/// (GIL released); None for an unknown handle. The handle is not consumed, and an error the
/// operation ended with is left to synchronize().
py::object wait_done(py::handle handle, double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) {
    throw hvd::InvalidArgumentError("torch_handle_wait_done(): seconds must be finite and >= 0");
  }
  long long id = 0;
  if (!id_of(handle, &id)) return py::none();
  const Pending* p = table().find(id);
  if (p == nullptr) return py::none();
  if (!p->handle.valid()) {
    try {
      p->native.attr("wait")(seconds);
    } catch (py::error_already_set& e) {
      if (e.matches(PyExc_TimeoutError)) return py::bool_(false);
    }
    return py::bool_(true);  // done, failed or not
  }
  // A copy: another thread may take the entry out of the table while this one waits.
  const hvd::Handle h = p->handle;
  const auto timeout = std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1e3)));
  bool done = true;
  {
    py::gil_scoped_release nogil;
    try {
      done = h.wait_for(timeout);
    } catch (...) {
      done = true;  // failed: synchronize() raises it
    }
  }
  return py::bool_(done);
}

/// Waits for every handle of `handles`, releasing the GIL once for all fast-path entries,
/// and returns their outputs in order (None for unknown handles). Every handle is consumed;
/// if some failed, the first failure (in the order given) is raised once all have completed.
py::list synchronize_all(py::sequence handles) {
  const size_t n = py::len(handles);
  // Every item is read before any entry leaves the table: reading one can raise (a sequence
  // whose __getitem__ fails), and entries already taken would then be destroyed with their
  // operations still in flight, freeing the memory those write.
  std::vector<long long> ids(n, 0);
  std::vector<bool> known(n, false);
  for (size_t i = 0; i < n; ++i) known[i] = id_of(handles[i], &ids[i]);
  std::vector<Pending> taken(n);
  for (size_t i = 0; i < n; ++i) known[i] = known[i] && table().take(ids[i], &taken[i]);
  std::vector<std::exception_ptr> errors(n);
  {
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) {
      if (!known[i] || !taken[i].handle.valid()) continue;
      try {
        taken[i].handle.wait();
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  }
  py::list out(n);
  std::exception_ptr first_error;
  for (size_t i = 0; i < n; ++i) {
    py::object value = py::none();
    if (known[i] && taken[i].handle.valid()) {
      if (errors[i]) {
        if (!first_error) first_error = errors[i];
      } else {
        value = std::move(taken[i].result);
      }
    } else if (known[i]) {
      try {
        value = finish(taken[i]);
      } catch (...) {
        if (!first_error) first_error = std::current_exception();
      }
    }
    out[i] = std::move(value);
  }
  if (first_error) std::rethrow_exception(first_error);
  return out;
}

/// torch_handle_synchronize as a plain METH_O function (once per tensor per step).
PyObject* synchronize_raw(PyObject*, PyObject* handle) {
  try {
    return synchronize(handle).release().ptr();
  } catch (...) {
    return raise_current_exception();
  }
}

PyMethodDef g_synchronize = {
    "torch_handle_synchronize", &synchronize_raw, METH_O,
    "torch_handle_synchronize(handle)\n--\n\nWaits for an integer handle (GIL released) and "
    "returns its output; None for an unknown handle. The handle is consumed."};

}  // namespace

long long add_fast_handle(hvd::Handle handle, py::object keep, py::object result) {
  py::object keep_storage = storage_of(keep);
  py::object result_storage = result.is(keep) ? py::none() : storage_of(result);
  return table().add(Pending{std::move(handle), std::move(keep), std::move(result), py::none(),
                             py::none(), std::move(keep_storage), std::move(result_storage)});
}

long long add_registered_handle(py::object native, py::object finish) {
  return table().add(Pending{hvd::Handle(), py::none(), py::none(), std::move(native),
                             std::move(finish), py::none(), py::none()});
}

void register_handle_table(py::module_& m) {
  m.def("torch_handle_register", &add_registered_handle, py::arg("native"), py::arg("finish"),
      "Stores a Handle and finish(handle) -> output; returns the new integer handle.");
  add_raw_function(m, &g_synchronize);
  m.def("torch_handle_synchronize_all", &synchronize_all, py::arg("handles"),
        "Waits for every integer handle (GIL released once) and returns their outputs in "
        "order (None for unknown ones). All are consumed; the first failure is raised after "
        "all completed.");
  m.def("torch_handle_poll", &poll, py::arg("handle"),
        "True once done, False while in flight, None for an unknown handle. Never blocks.");
  m.def("torch_handle_wait_done", &wait_done, py::arg("handle"), py::arg("seconds"),
        "Waits up to `seconds` (GIL released): True once done (failed or not), False when "
        "still in flight, None for an unknown handle. The handle is not consumed.");
  m.def("torch_handle_count", []() { return table().size(); },
        "Integer handles not synchronized yet (for tests).");
  py::module_::import("atexit").attr("register")(
      py::cpp_function([]() { table().clear_at_exit(); }));
}

}  // namespace hvdpy
