// Copyright horovod_cpp authors.
#include "backends/shm/shm_setup.h"

#include <unistd.h>

#include <chrono>

#include "common/logging.h"

namespace hvd {
namespace {

// True on every rank iff `ok` on every rank.
bool all_agree(MPI_Comm comm, bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) return false;
  return all == 1;
}

}  // namespace

std::unique_ptr<ShmAllreduce> make_shm_allreduce(MPI_Comm comm, int set_id, int64_t chunk_bytes,
                                                 std::string* why_not) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size < 2) {
    *why_not = "a single rank needs no communication";
    return nullptr;
  }
  MPI_Comm local = MPI_COMM_NULL;
  int local_size = 0;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
  }
  if (!all_agree(comm, local_size == size)) {
    *why_not = "the ranks are on more than one host";
    return nullptr;
  }
  // A name unique to this job, set and moment: rank 0's pid and clock.
  long long id[2] = {static_cast<long long>(getpid()),
                     static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count())};
  MPI_Bcast(id, 2, MPI_LONG_LONG, 0, comm);
  const std::string tag = std::to_string(id[0]) + "." + std::to_string(set_id) + "." +
                          std::to_string(id[1] % 1000000007LL);
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
  MPI_Barrier(comm);  // everyone has mapped everyone: the names can go
  shm->unlink();
  return shm;
}

}  // namespace hvd
