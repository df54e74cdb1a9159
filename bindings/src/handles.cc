// Copyright horovod_cpp authors. hvd::Handle for Python.
#include <chrono>
#include <algorithm>
#include <cmath>

#include "bindings.h"

namespace hvdpy {

PyHandle::PyHandle(hvd::Handle handle, std::vector<py::object> keep_alive, py::object output,
                   ResultKind kind)
    : handle_(std::move(handle)),
      keep_alive_(std::move(keep_alive)),
      output_(std::move(output)),
      kind_(kind) {}

PyHandle::~PyHandle() {
  // Dropped while the operation may still touch the buffers: leak the references rather
  // than free memory the library is writing (and rather than block in a destructor).
  if (handle_.valid() && !handle_.poll()) {
    for (auto& o : keep_alive_) o.release();
    output_.release();
  }
}

bool PyHandle::poll() const { return handle_.poll(); }

void PyHandle::wait(py::object timeout) {
  if (timeout.is_none()) {
    py::gil_scoped_release nogil;
    handle_.wait();
    return;
  }
  const double seconds = timeout.cast<double>();
  if (!(seconds >= 0) || !std::isfinite(seconds)) {
    throw hvd::InvalidArgumentError("wait(): timeout must be a finite number >= 0");
  }
  const auto ms = std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000.0)));
  py::gil_scoped_release nogil;
  handle_.wait(ms);
}

py::object PyHandle::result() {
  wait(py::none());
  switch (kind_) {
    case ResultKind::kGiven:
      return output_;
    case ResultKind::kLibrary:
      return to_python(handle_.result());
    case ResultKind::kLibraryList: {
      py::list out;
      for (const hvd::Tensor& t : handle_.results()) out.append(to_python(t));
      return std::move(out);
    }
    case ResultKind::kAlltoall: {
      std::vector<int64_t> splits = handle_.received_splits();
      py::array_t<int64_t> s(static_cast<py::ssize_t>(splits.size()));
      std::copy(splits.begin(), splits.end(), s.mutable_data());
      return py::make_tuple(to_python(handle_.result()), s);
    }
  }
  return output_;
}

std::vector<int64_t> PyHandle::received_splits() {
  wait(py::none());
  return handle_.received_splits();
}

void register_handles(py::module_& m) {
  py::class_<PyHandle>(m, "Handle", "Completion of an asynchronous collective.")
      .def("poll", &PyHandle::poll, "True once the operation finished (never blocks).")
      .def("wait", &PyHandle::wait, py::arg("timeout") = py::none(),
           "Blocks until done (GIL released); raises the operation's error. With a timeout in "
           "seconds, raises HorovodTimeoutError on expiry (the operation goes on).")
      .def("result", &PyHandle::result,
           "Waits, then returns the output (allgather, reducescatter: a new numpy array; "
           "grouped: a list; alltoall: (array, received_splits)).")
      .def("received_splits", &PyHandle::received_splits,
           "Alltoall: the number of rows received from each rank (waits first).")
      .def_property_readonly("name", &PyHandle::name)
      .def_property_readonly("error_code", &PyHandle::error_code)
      .def_property_readonly("error_message", &PyHandle::error_message);
}

}  // namespace hvdpy
