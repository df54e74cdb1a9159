// Copyright horovod_cpp authors. Broadcast, allgather and alltoall through the shared-memory
// segments of ShmAllreduce (shm_allreduce.h describes the segments and counters).
//
// Each round moves one piece of every block: its owner copies it into its slot and publishes
// it, the readers copy it out and mark the round collected. Slots alternate, so a round's
// piece is written while the previous one is still read. Every rank runs every round (the
// number follows from sizes every rank knows), and every rank marks every round collected:
// that is what lets the next round (of any collective) reuse a slot.
//
// That is two copies per byte, where a read straight from the peer's memory is one; but a
// piece stays in cache between the two and a round costs two flag writes, while
// process_vm_readv (Open MPI's CMA) pins and copies the peer's pages one by one: on the
// benchmark machine about 8 GB/s, so two in-cache copies beat it (docs/benchmarks-history.md,
// rounds nine and eleven; at 32-128 KiB only since rounds move through the slots like a
// ring, next_round()). Blocks in the single-copy window (off by default; set at setup when the
// probe found process_vm_readv usable on every rank) go in one round instead, and so do
// the larger calls for which the measured paths (gather_paths.h, run_way()) chose one copy:
// every source publishes its buffer's address, the readers copy from it with
// process_vm_readv, and each source waits until every reader is done before it returns (its
// buffer must not change under them).
#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/host/stream_copy.h"
#include "transport/shm/shm_allreduce.h"

namespace hvd {
namespace {

// Bytes of a block of `total` bytes in the round that starts at byte `lo`: up to `per`.
inline int64_t piece(int64_t total, int64_t lo, int64_t per) {
  return std::max<int64_t>(0, std::min(per, total - lo));
}

// Copies `n` bytes into a collective's result: past the cache when the whole result has at
// least kStreamCopyMinBytes (`result_bytes`), since its lines are cold and not read again soon
// (kernels/host/stream_copy.h).
inline void copy_out(unsigned char* dst, const unsigned char* src, int64_t n,
                     int64_t result_bytes) {
  if (result_bytes >= static_cast<int64_t>(kStreamCopyMinBytes)) {
    stream_copy(dst, src, static_cast<size_t>(n));
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n));
  }
}

std::vector<int64_t> displacements(const std::vector<int64_t>& bytes) {
  std::vector<int64_t> d(bytes.size(), 0);
  for (size_t r = 1; r < bytes.size(); ++r) d[r] = d[r - 1] + bytes[r - 1];
  return d;
}

}  // namespace

Status ShmAllreduce::read_round(const void* in, int64_t in_bytes, const std::vector<int64_t>& from,
                                const std::vector<int64_t>& bytes, unsigned char* out,
                                const std::vector<int64_t>& at) {
  const int n = size_, me = rank_;
  const uint64_t s = step_++;
  publish_buffer(in, in_bytes, s);
  Status st;
  for (int k = 1; k < n && st.ok(); ++k) {  // rank me+1 first: the readers spread out
    const size_t j = static_cast<size_t>((me + k) % n);
    if (bytes[j] == 0) continue;
    st = wait_rank(static_cast<int>(j), kPublished, s + 1);
    if (st.ok()) st = read_peer(static_cast<int>(j), from.empty() ? 0 : from[j], out + at[j], bytes[j]);
  }
  signal(kCollected, s + 1);  // even after a failed read: no peer waits for ever
  Status done = wait_all(kCollected, s + 1);
  return st.ok() ? done : st;
}

bool ShmAllreduce::choose_single(GatherPaths::Kind kind, int64_t bytes, int64_t factor,
                                 bool* timed) {
  *timed = false;
  if (use_single_copy(bytes, factor)) return true;  // the fixed window, where one is set
  if (paths_.band(kind, bytes) < 0) return false;
  *timed = true;
  return paths_.second_way(kind, bytes);
}

template <typename Run>
Status ShmAllreduce::run_way(GatherPaths::Kind kind, int64_t bytes, int64_t factor, Run&& run) {
  bool timed = false;
  const bool single = choose_single(kind, bytes, factor, &timed);
  if (!timed) return run(single);
  const auto t0 = std::chrono::steady_clock::now();
  Status st = run(single);
  if (st.ok()) {
    record_path(kind, bytes, single,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return st;
}

Status ShmAllreduce::broadcast(void* buf, int64_t bytes, int root) {
  return run_way(GatherPaths::kBroadcast, bytes, 1, [&](bool single) {
    return single ? broadcast_single(buf, bytes, root) : broadcast_two(buf, bytes, root);
  });
}

Status ShmAllreduce::broadcast_single(void* buf, int64_t bytes, int root) {
  const uint64_t s = step_++;
  if (rank_ == root) {
    publish_buffer(buf, bytes, s);
    signal(kCollected, s + 1);
    return wait_all(kCollected, s + 1);
  }
  Status st = wait_rank(root, kPublished, s + 1);
  if (st.ok()) st = read_peer(root, 0, buf, bytes);
  signal(kCollected, s + 1);  // even after a failed read: the root must not wait for ever
  return st;
}

Status ShmAllreduce::broadcast_two(void* buf, int64_t bytes, int root) {
  unsigned char* p = static_cast<unsigned char*>(buf);
  const int64_t per = chunk_bytes_;
  for (int64_t lo = 0; lo < bytes; lo += per) {
    const int64_t len = std::min(per, bytes - lo);
    const Round rd = next_round(len);
    const uint64_t s = rd.s;
    if (rank_ == root) {
      if (s >= 2) HVD_RETURN_IF_ERROR(wait_all(kCollected, s - 1));  // slot free again
      std::memcpy(slot(root, rd), p + lo, static_cast<size_t>(len));
      signal(kPublished, s + 1);
    } else {
      HVD_RETURN_IF_ERROR(wait_rank(root, kPublished, s + 1));
      std::memcpy(p + lo, slot(root, rd), static_cast<size_t>(len));
    }
    signal(kCollected, s + 1);
  }
  return Status::OK();
}

Status ShmAllreduce::allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes) {
  const int n = size_, me = rank_;
  const unsigned char* src = static_cast<const unsigned char*>(in);
  unsigned char* dst = static_cast<unsigned char*>(out);
  const std::vector<int64_t> at = displacements(bytes);
  const int64_t longest = *std::max_element(bytes.begin(), bytes.end());
  const int64_t mine = bytes[static_cast<size_t>(me)];
  return run_way(GatherPaths::kAllgather, longest * n, kGatherFactor, [&](bool single) {
    if (single) {
      const int64_t total = at.back() + bytes.back();
      if (mine > 0) copy_out(dst + at[static_cast<size_t>(me)], src, mine, total);
      return read_round(in, mine, {}, bytes, dst, at);
    }
    return allgather_two(src, dst, bytes, at, longest);
  });
}

Status ShmAllreduce::allgather_two(const unsigned char* src, unsigned char* dst,
                                   const std::vector<int64_t>& bytes,
                                   const std::vector<int64_t>& at, int64_t longest) {
  const int n = size_, me = rank_;
  const int64_t per = chunk_bytes_;
  const int64_t mine = bytes[static_cast<size_t>(me)];
  const int64_t total = at.back() + bytes.back();
  for (int64_t lo = 0; lo < longest; lo += per) {
    const Round rd = next_round(std::min(per, longest - lo));
    const uint64_t s = rd.s;
    if (s >= 2) HVD_RETURN_IF_ERROR(wait_all(kCollected, s - 1));
    const int64_t len = piece(mine, lo, per);
    if (len > 0) std::memcpy(slot(me, rd), src + lo, static_cast<size_t>(len));
    signal(kPublished, s + 1);
    // My own block goes straight from the input, while the peers copy my piece.
    if (len > 0) copy_out(dst + at[static_cast<size_t>(me)] + lo, src + lo, len, total);
    for (int j = 0; j < n; ++j) {
      const int64_t lj = piece(bytes[static_cast<size_t>(j)], lo, per);
      if (j == me || lj == 0) continue;
      HVD_RETURN_IF_ERROR(wait_rank(j, kPublished, s + 1));
      copy_out(dst + at[static_cast<size_t>(j)] + lo, slot(j, rd), lj, total);
    }
    signal(kCollected, s + 1);
  }
  return Status::OK();
}

Status ShmAllreduce::alltoallv(const void* in, const std::vector<int64_t>& send, void* out,
                               const std::vector<int64_t>& recv, const std::vector<int64_t>& from,
                               int64_t longest) {
  const int n = size_, me = rank_;
  const unsigned char* src = static_cast<const unsigned char*>(in);
  unsigned char* dst = static_cast<unsigned char*>(out);
  const std::vector<int64_t> sat = displacements(send);
  const std::vector<int64_t> rat = displacements(recv);
  const size_t m = static_cast<size_t>(me);
  if (send[m] > 0) copy_out(dst + rat[m], src + sat[m], send[m], rat.back() + recv.back());
  return run_way(GatherPaths::kAlltoall, longest * n, kGatherFactor, [&](bool single) {
    if (single) return read_round(in, sat.back() + send.back(), from, recv, dst, rat);
    return alltoall_two(src, send, sat, dst, recv, rat, longest);
  });
}

Status ShmAllreduce::alltoall_two(const unsigned char* src, const std::vector<int64_t>& send,
                                  const std::vector<int64_t>& sat, unsigned char* dst,
                                  const std::vector<int64_t>& recv, const std::vector<int64_t>& rat,
                                  int64_t longest) {
  const int n = size_, me = rank_;
  // The slot holds one piece per destination (on cache lines of its own where they fit),
  // `stride` apart: a round takes no more of the slot than its longest block needs.
  int64_t per = chunk_bytes_ / n;
  per = per >= 64 ? per / 64 * 64 : std::max<int64_t>(1, per);
  const int64_t stride = std::min(per, (longest + 63) / 64 * 64);
  const int64_t total = rat.back() + recv.back();
  for (int64_t lo = 0; lo < longest; lo += per) {
    const Round rd = next_round(n * stride);
    const uint64_t s = rd.s;
    if (s >= 2) HVD_RETURN_IF_ERROR(wait_all(kCollected, s - 1));
    unsigned char* mine = slot(me, rd);
    for (int j = 0; j < n; ++j) {
      const int64_t len = piece(send[static_cast<size_t>(j)], lo, per);
      if (j == me || len == 0) continue;
      std::memcpy(mine + j * stride, src + sat[static_cast<size_t>(j)] + lo, static_cast<size_t>(len));
    }
    signal(kPublished, s + 1);
    for (int j = 0; j < n; ++j) {
      const int64_t len = piece(recv[static_cast<size_t>(j)], lo, per);
      if (j == me || len == 0) continue;
      HVD_RETURN_IF_ERROR(wait_rank(j, kPublished, s + 1));
      copy_out(dst + rat[static_cast<size_t>(j)] + lo, slot(j, rd) + me * stride, len, total);
    }
    signal(kCollected, s + 1);
  }
  return Status::OK();
}

}  // namespace hvd
