// Copyright horovod_cpp authors.
#include "transport/shm/shm_setup.h"

#include <unistd.h>

#include <atomic>
#include <chrono>

#include "transport/transport_context.h"
#include "common/logging.h"

namespace hvd {

bool on_one_host(Bootstrap& group, int host, std::string* why_not) {
  const int size = group.size();
  if (size < 2) {
    *why_not = "a single rank needs no communication";
    return false;
  }
  std::unique_ptr<Bootstrap> local;
  Status s = split_by_host(group, host, &local);
  const int local_size = s.ok() ? local->size() : 0;
  if (!all_agree(group, s.ok() && local_size == size)) {
    *why_not = !s.ok() ? s.message() : local_size != size
        ? "the ranks are on more than one host" : "another rank could not find its host's ranks";
    return false;
  }
  return true;
}

bool segment_tag(Bootstrap& group, int set_id, std::string* tag, std::string* why_not) {
  // A name unique to this job, set and moment: the root's pid, clock, and a count of the
  // tags this process made (two groups of one process, e.g. the in-process tests' hosts, may
  // read the same clock).
  static std::atomic<long long> made{0};
  long long id[3] = {static_cast<long long>(getpid()),
                     static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count()),
                     made.fetch_add(1)};
  const Status s = group.broadcast(id, sizeof(id), 0);
  if (!all_agree(group, s.ok())) {
    *why_not = !s.ok() ? s.message() : "another rank did not receive the segment name";
    return false;
  }
  *tag = std::to_string(id[0]) + "." + std::to_string(set_id) + "." +
         std::to_string(id[1] % 1000000007LL) + "." + std::to_string(id[2]);
  return true;
}

std::unique_ptr<ShmAllreduce> make_shm_allreduce(Bootstrap& group, int set_id, int64_t chunk_bytes,
                                                 int64_t single_copy_bytes,
                                                 int64_t single_copy_max_bytes,
                                                 int64_t measured_min_bytes, uint64_t test_seed,
                                                 std::string* why_not, int host) {
  const int rank = group.rank(), size = group.size();
  std::string tag;
  if (!on_one_host(group, host, why_not) || !segment_tag(group, set_id, &tag, why_not)) {
    return nullptr;
  }
  std::unique_ptr<ShmAllreduce> shm;
  Status s = ShmAllreduce::create(tag, rank, size, chunk_bytes, &shm);
  if (!all_agree(group, s.ok())) {
    *why_not = s.ok() ? "another rank could not create its shared-memory segment" : s.message();
    // Not an ordinary choice (as many hosts are): the job wanted shared memory and runs slower.
    HVD_LOG(kWarning) << "process set " << set_id << ": shared-memory allreduce unavailable, "
                      << "using MPI instead: " << *why_not;
    return nullptr;
  }
  s = shm->attach();
  if (!all_agree(group, s.ok())) {
    *why_not = s.ok() ? "another rank could not map the shared-memory segments" : s.message();
    HVD_LOG(kWarning) << "process set " << set_id << ": shared-memory allreduce unavailable, "
                      << "using MPI instead: " << *why_not;
    return nullptr;
  }
  s = group.barrier();  // everyone has mapped everyone: the names can go
  shm->unlink();
  if (!all_agree(group, s.ok())) {
    *why_not = !s.ok() ? s.message() : "another rank failed the barrier after mapping";
    return nullptr;
  }
  if (!shm->peer_watch().setup(group, set_id)) {
    *why_not = "exchanging the ranks' process ids failed";
    return nullptr;
  }
  if (!shm->peer_watch().enabled()) {
    HVD_LOG(kInfo) << "process set " << set_id << ": a rank cannot see its peers' processes "
                   << "(pid namespaces): a dead peer is noticed at the shared-memory deadline only";
  }
  if (single_copy_bytes < 0 && measured_min_bytes <= 0) return shm;
  if (all_agree(group, shm->probe_single_copy())) {
    if (single_copy_bytes >= 0) shm->enable_single_copy(single_copy_bytes, single_copy_max_bytes);
    if (measured_min_bytes > 0) shm->enable_measured_paths(measured_min_bytes, test_seed);
  } else {
    HVD_LOG(kInfo) << "process set " << set_id << ": a rank cannot read its peers' memory "
                   << "(process_vm_readv): broadcast, allgather and alltoall copy twice";
  }
  return shm;
}

}  // namespace hvd
