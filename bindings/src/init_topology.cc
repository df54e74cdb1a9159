// Copyright horovod_cpp authors. init/shutdown, topology and build queries.
#include "bindings.h"
#include "horovod_cpp/elastic.h"

namespace hvdpy {

void register_init_topology(py::module_& m) {
  m.def(
      "init",
      [](py::object comm_fortran, std::vector<std::vector<int>> process_sets) {
        hvd::InitOptions options;
        options.process_sets = std::move(process_sets);
        if (!comm_fortran.is_none()) {
          options.mpi_comm_fortran = comm_fortran.cast<long long>();
          options.use_comm = true;
        }
        py::gil_scoped_release nogil;  // collective: waits for every rank
        hvd::init(options);
      },
      py::arg("comm_fortran") = py::none(),
      py::arg("process_sets") = std::vector<std::vector<int>>(),
      "Starts horovod_cpp (collective). comm_fortran: MPI_Comm_c2f handle of the communicator "
      "to run on (mpi4py: comm.py2f()), None for MPI_COMM_WORLD. process_sets: sorted global "
      "ranks of the sets to create, which get ids 1, 2, ...");
  m.def("shutdown", []() {
    py::gil_scoped_release nogil;
    hvd::shutdown();
  });
  m.def("is_initialized", &hvd::is_initialized);
  m.def("rank", &hvd::rank);
  m.def("size", &hvd::size);
  m.def("local_rank", &hvd::local_rank);
  m.def("local_size", &hvd::local_size);
  m.def("cross_rank", &hvd::cross_rank);
  m.def("cross_size", &hvd::cross_size);
  m.def("mpi_built", &hvd::mpi_built);
  m.def("nccl_built", &hvd::nccl_built);
  m.def("cuda_built", &hvd::cuda_built);
  m.def("gloo_built", &hvd::gloo_built);
  m.def("gloo_enabled", &hvd::gloo_enabled);
  m.def(
      "elastic_hosts_updated",
      []() {
        py::gil_scoped_release nogil;  // collective: waits for every rank
        return hvd::elastic::hosts_updated();
      },
      "Elastic mode (collective): whether the driver asked this membership to change (new "
      "hosts), rank 0's answer on every rank; False when not elastic.");
  m.def("elastic_generation", &hvd::elastic::generation,
        "The current elastic membership's generation (0 when not elastic).");
}

}  // namespace hvdpy
