// Copyright horovod_cpp authors. Entry point of the pybind11 module horovod_cpp._C.
#include "bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "horovod_cpp native module (use the horovod_cpp package, not this module)";
  hvdpy::register_errors(m);
  hvdpy::register_tensors(m);
  hvdpy::register_init_topology(m);
  hvdpy::register_handles(m);
  hvdpy::register_collectives(m);
  hvdpy::register_process_sets(m);
  hvdpy::register_handle_table(m);
  hvdpy::register_allreduce(m);
}
