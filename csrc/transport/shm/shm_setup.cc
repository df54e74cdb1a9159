// Copyright horovod_cpp authors.
#include "transport/shm/shm_setup.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "transport/mpi/mpi_context.h"
#include "common/logging.h"

namespace hvd {
namespace {

// "MPI_Xxx failed: <MPI's message>" for the reason shared memory is not used.
std::string failed(const char* call, int rc) {
  return std::string(call) + " failed: " + mpi_error_string(rc);
}

}  // namespace

bool all_agree(MPI_Comm comm, bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) return false;
  return all == 1;
}

bool on_one_host(MPI_Comm comm, int host, std::string* why_not) {
  int size = 1;
  int rc = MPI_Comm_size(comm, &size);
  if (rc != MPI_SUCCESS) {  // the communicator is unusable on this rank: so are the others
    *why_not = failed("MPI_Comm_size", rc);
    return false;
  }
  if (size < 2) {
    *why_not = "a single rank needs no communication";
    return false;
  }
  MPI_Comm local = MPI_COMM_NULL;
  int local_size = 0;
  std::string split_error;
  rc = split_by_host(comm, host, &local);
  if (rc == MPI_SUCCESS) {
    rc = MPI_Comm_size(local, &local_size);
    if (rc != MPI_SUCCESS) split_error = failed("MPI_Comm_size (host communicator)", rc);
    MPI_Comm_free(&local);
  } else {
    split_error = failed("MPI_Comm_split_type/MPI_Comm_split (host communicator)", rc);
  }
  if (!all_agree(comm, split_error.empty() && local_size == size)) {
    *why_not = !split_error.empty() ? split_error : local_size != size
        ? "the ranks are on more than one host" : "another rank could not find its host's ranks";
    return false;
  }
  return true;
}

bool segment_tag(MPI_Comm comm, int set_id, std::string* tag, std::string* why_not) {
  // A name unique to this job, set and moment: rank 0's pid and clock.
  long long id[2] = {static_cast<long long>(getpid()),
                     static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count())};
  const int rc = MPI_Bcast(id, 2, MPI_LONG_LONG, 0, comm);
  if (!all_agree(comm, rc == MPI_SUCCESS)) {
    *why_not = rc != MPI_SUCCESS ? failed("MPI_Bcast (segment name)", rc)
                                 : "another rank did not receive the segment name";
    return false;
  }
  *tag = std::to_string(id[0]) + "." + std::to_string(set_id) + "." +
         std::to_string(id[1] % 1000000007LL);
  return true;
}

int split_by_host(MPI_Comm comm, int host, MPI_Comm* local) {
  int rank = 0;
  const int rc = MPI_Comm_rank(comm, &rank);
  if (rc != MPI_SUCCESS) return rc;
  if (host >= 0) return MPI_Comm_split(comm, host, rank, local);
  return MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, local);
}

int test_host(const TransportContext& ctx) {
  const int64_t per = ctx.config->test_ranks_per_host;
  if (per <= 0) return -1;
  const int global = ctx.layout.global_ranks[static_cast<size_t>(ctx.layout.rank)];
  if (ctx.config->test_hosts_round_robin) {
    return global % std::max(1, static_cast<int>(ctx.mpi->size() / per));
  }
  return static_cast<int>(global / per);
}

std::unique_ptr<ShmAllreduce> make_shm_allreduce(MPI_Comm comm, int set_id, int64_t chunk_bytes,
                                                 int64_t single_copy_bytes,
                                                 int64_t single_copy_max_bytes,
                                                 int64_t measured_min_bytes, uint64_t test_seed,
                                                 std::string* why_not, int host) {
  int rank = 0, size = 1;
  int rc = MPI_Comm_rank(comm, &rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm, &size);
  if (rc != MPI_SUCCESS) {  // the communicator is unusable on this rank: so are the others
    *why_not = failed("MPI_Comm_rank/MPI_Comm_size", rc);
    return nullptr;
  }
  std::string tag;
  if (!on_one_host(comm, host, why_not) || !segment_tag(comm, set_id, &tag, why_not)) {
    return nullptr;
  }
  std::unique_ptr<ShmAllreduce> shm;
  Status s = ShmAllreduce::create(tag, rank, size, chunk_bytes, &shm);
  if (!all_agree(comm, s.ok())) {
    *why_not = s.ok() ? "another rank could not create its shared-memory segment" : s.message();
    // Not an ordinary choice (as many hosts are): the job wanted shared memory and runs slower.
    HVD_LOG(kWarning) << "process set " << set_id << ": shared-memory allreduce unavailable, "
                      << "using MPI instead: " << *why_not;
    return nullptr;
  }
  s = shm->attach();
  if (!all_agree(comm, s.ok())) {
    *why_not = s.ok() ? "another rank could not map the shared-memory segments" : s.message();
    HVD_LOG(kWarning) << "process set " << set_id << ": shared-memory allreduce unavailable, "
                      << "using MPI instead: " << *why_not;
    return nullptr;
  }
  rc = MPI_Barrier(comm);  // everyone has mapped everyone: the names can go
  shm->unlink();
  if (!all_agree(comm, rc == MPI_SUCCESS)) {
    *why_not = rc != MPI_SUCCESS ? failed("MPI_Barrier (after mapping)", rc)
                                 : "another rank failed the barrier after mapping";
    return nullptr;
  }
  if (single_copy_bytes < 0 && measured_min_bytes <= 0) return shm;
  if (all_agree(comm, shm->probe_single_copy())) {
    if (single_copy_bytes >= 0) shm->enable_single_copy(single_copy_bytes, single_copy_max_bytes);
    if (measured_min_bytes > 0) shm->enable_measured_paths(measured_min_bytes, test_seed);
  } else {
    HVD_LOG(kInfo) << "process set " << set_id << ": a rank cannot read its peers' memory "
                   << "(process_vm_readv): broadcast, allgather and alltoall copy twice";
  }
  return shm;
}

}  // namespace hvd
