// Copyright horovod_cpp authors. Sets up shared-memory allreduce for a communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "transport/mpi/transport_context.h"
#include "transport/shm/shm_allreduce.h"

namespace hvd {

/// Collective over `comm`: returns a ready ShmAllreduce when every rank of `comm` is on this
/// host and every rank could create and map its segment; otherwise nullptr on every rank, with
/// the reason in `why_not` (the fallback is MPI).
/// `single_copy_bytes` (< 0: never) and `single_copy_max_bytes` (<= 0: no limit) are passed to
/// enable_single_copy(), and `measured_min_bytes` (<= 0: off) and `test_seed` to
/// enable_measured_paths(), when every rank can read its peers' memory.
/// `host` (>= 0) replaces the real host of this rank (HOROVOD_CPP_TEST_RANKS_PER_HOST).
std::unique_ptr<ShmAllreduce> make_shm_allreduce(MPI_Comm comm, int set_id, int64_t chunk_bytes,
                                                 int64_t single_copy_bytes,
                                                 int64_t single_copy_max_bytes,
                                                 int64_t measured_min_bytes, uint64_t test_seed,
                                                 std::string* why_not, int host = -1);

/// Splits `comm` into the ranks of this rank's host, in `comm`'s order: the real host
/// (MPI_COMM_TYPE_SHARED) when `host` < 0, else the ranks that passed the same `host`.
/// Collective over `comm`; returns MPI's error code.
int split_by_host(MPI_Comm comm, int host, MPI_Comm* local);

/// Collective over `comm`: true on every rank iff `ok` on every rank (false as well when the
/// exchange itself fails).
bool all_agree(MPI_Comm comm, bool ok);

/// Collective over `comm`: true on every rank when `comm` has at least two ranks, all on one
/// host (`host` as in split_by_host()); otherwise false on every rank, the reason in `why_not`.
bool on_one_host(MPI_Comm comm, int host, std::string* why_not);

/// Collective over `comm`: a name for shared-memory segments unique to this job, set `set_id`
/// and moment, the same on every rank (false on every rank when the exchange fails).
bool segment_tag(MPI_Comm comm, int set_id, std::string* tag, std::string* why_not);

/// The host that HOROVOD_CPP_TEST_RANKS_PER_HOST gives this rank of the set (its global rank
/// divided by that number; with HOROVOD_CPP_TEST_HOSTS_ROUND_ROBIN, its global rank modulo the
/// number of hosts), or -1 (the real host) when it is not set.
int test_host(const TransportContext& ctx);

}  // namespace hvd
