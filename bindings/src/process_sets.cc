// Copyright horovod_cpp authors. Process sets (by integer id), timeline, MPI thread support.
#include <mpi.h>

#include "bindings.h"

namespace hvdpy {

void register_process_sets(py::module_& m) {
  m.def(
      "add_process_set",
      [](const std::vector<int>& ranks) {
        py::gil_scoped_release nogil;  // collective over every rank
        return hvd::add_process_set(ranks).id;
      },
      py::arg("ranks"), "Adds a process set of these global ranks (collective); returns its id.");
  m.def(
      "remove_process_set",
      [](int id) {
        py::gil_scoped_release nogil;  // collective over every rank
        hvd::remove_process_set(process_set_of(id));
      },
      py::arg("process_set"), "Removes a process set (collective).");
  m.def(
      "process_set_ranks", [](int id) { return hvd::process_set_ranks(process_set_of(id)); },
      py::arg("process_set"), "The sorted global ranks of a process set.");
  m.def(
      "process_set_rank", [](int id) { return hvd::process_set_rank(process_set_of(id)); },
      py::arg("process_set"), "This rank's index in the set, -1 if it is not a member.");
  m.def(
      "process_set_size", [](int id) { return hvd::process_set_size(process_set_of(id)); },
      py::arg("process_set"), "The number of ranks of a process set.");

  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) {
        py::gil_scoped_release nogil;
        hvd::start_timeline(path, mark_cycles);
      },
      py::arg("file_path"), py::arg("mark_cycles") = false,
      "Starts writing a Chrome-trace timeline (rank 0 writes the file).");
  m.def(
      "stop_timeline",
      []() {
        py::gil_scoped_release nogil;
        hvd::stop_timeline();
      },
      "Stops the timeline, leaving a complete JSON file.");

  m.def(
      "mpi_threads_supported",
      []() {
        // A Gloo job has no MPI at all (and must not touch it).
        if (hvd::gloo_enabled() && hvd::is_initialized()) return false;
        int initialized = 0;
        int finalized = 0;
        MPI_Initialized(&initialized);
        MPI_Finalized(&finalized);
        if (!initialized || finalized || !hvd::is_initialized()) {
          throw hvd::NotInitializedError(
              "horovod_cpp: mpi_threads_supported() called before init()");
        }
        int provided = MPI_THREAD_SINGLE;
        MPI_Query_thread(&provided);
        return provided >= MPI_THREAD_MULTIPLE;
      },
      "True when MPI provides MPI_THREAD_MULTIPLE.");
}

}  // namespace hvdpy
