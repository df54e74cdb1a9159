// Copyright horovod_cpp authors. Sets up shared-memory allreduce for a group of ranks.
#pragma once

#include <memory>
#include <string>

#include "transport/bootstrap.h"
#include "transport/shm/shm_allreduce.h"

namespace hvd {

/// Collective over `group`: returns a ready ShmAllreduce when every member of `group` is on
/// this host and every member could create and map its segment; otherwise nullptr on every
/// member, with the reason in `why_not` (the fallback is the next transport).
/// `single_copy_bytes` (< 0: never) and `single_copy_max_bytes` (<= 0: no limit) are passed to
/// enable_single_copy(), and `measured_min_bytes` (<= 0: off) and `test_seed` to
/// enable_measured_paths(), when every rank can read its peers' memory.
/// `host` (>= 0) replaces the real host of this rank (HOROVOD_CPP_TEST_RANKS_PER_HOST).
std::unique_ptr<ShmAllreduce> make_shm_allreduce(Bootstrap& group, int set_id, int64_t chunk_bytes,
                                                 int64_t single_copy_bytes,
                                                 int64_t single_copy_max_bytes,
                                                 int64_t measured_min_bytes, uint64_t test_seed,
                                                 std::string* why_not, int host = -1);

/// Collective over `group`: true on every member when `group` has at least two members, all
/// on one host (`host` as in split_by_host()); otherwise false on every member, the reason in
/// `why_not`.
bool on_one_host(Bootstrap& group, int host, std::string* why_not);

/// Collective over `group`: a name for shared-memory segments unique to this job, set `set_id`
/// and moment, the same on every member (false on every member when the exchange fails).
bool segment_tag(Bootstrap& group, int set_id, std::string* tag, std::string* why_not);

}  // namespace hvd
