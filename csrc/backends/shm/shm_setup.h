// Copyright horovod_cpp authors. Sets up shared-memory allreduce for a communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "backends/shm/shm_allreduce.h"

namespace hvd {

/// Collective over `comm`: returns a ready ShmAllreduce when every rank of `comm` is on this
/// host and every rank could create and map its segment; otherwise nullptr on every rank, with
/// the reason in `why_not` (the fallback is MPI).
/// `single_copy_bytes` (< 0: never) is passed to enable_single_copy() when every rank can
/// read its peers' memory.
std::unique_ptr<ShmAllreduce> make_shm_allreduce(MPI_Comm comm, int set_id, int64_t chunk_bytes,
                                                 int64_t single_copy_bytes, std::string* why_not);

}  // namespace hvd
