// Copyright horovod_cpp authors. Shutting horovod_cpp down when the program finalizes MPI
// under it.
//
// A program that initialized MPI itself (a C++ program calling MPI_Init_thread, or Python
// with mpi4py imported before init()) may call MPI_Finalize without hvd::shutdown() first:
// mpi4py does at interpreter exit, before the C library's exit handlers run. The library's
// threads would then call MPI after it was finalized, and Open MPI aborts the job. So
// hvd::init() (api.cc) installs its shutdown here, and the MPI World runs it from the delete
// callback of an attribute on MPI_COMM_SELF, which MPI_Finalize deletes first, while MPI
// still works (MPI-3.1, section 8.7.1).
#pragma once

namespace hvd {

/// Installs the library's shutdown (a plain function: it outlives every Runtime).
void set_library_shutdown(void (*shutdown)());

/// Runs the installed shutdown; nothing when none was installed.
void run_library_shutdown();

}  // namespace hvd
