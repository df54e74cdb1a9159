// Copyright horovod_cpp authors. Collectives through shared memory, for the ranks of one host:
// allreduce here, reducescatter in shm_reducescatter.cc, broadcast/allgather/alltoall in
// shm_gather.cc, all over the same segments, slots and counters.
//
// Every rank maps every other rank's segment. A reduction runs over the concatenation of the
// caller's buffers ("segments": fused tensors need no packing), in chunks that stay in cache,
// each chunk in three steps separated by flag waits:
//   1. publish: rank r copies, for every other rank j, the j-th share of its chunk into its
//      own slot (its own share it will read straight from its buffer);
//   2. reduce: rank r reduces share r of the chunk from its buffer and every peer's slot,
//      scales it (Average, postscale), writes it to its buffer and to its slot;
//   3. collect: rank r copies every peer's reduced share from the peer's slot to its buffer.
// Two slots alternate, so chunk k+1 is published while peers still collect chunk k. Per byte
// each rank moves (n-1)/n in, reduces 1/n with n reads, and moves (n-1)/n out: on this kind of
// machine, about half the memory traffic of MPI's shared-memory transport. Vectors of at most
// kWholeBytes take one round with one wait: each rank publishes its whole vector and folds all.
// Every element is folded in rank order, ((x0 op x1) op x2) ..., on either path and whoever
// owns it, so its value does not depend on its place in a fused batch.
//
// Background thread only. Waits spin briefly (yielding only where ranks outnumber cores),
// then sleep; a wait that lasts checks every ~50 ms that the peer still runs (PeerWatch), so a
// dead peer fails the collective at once, and that no peer has left after an error of its own
// (leave(): a mark in its header), so a live peer that will not come fails it as soon; any
// other live peer that does not arrive within the deadline turns into an error, never a hang.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/shm/gather_paths.h"
#include "transport/shm/peer_watch.h"
#include "common/status.h"
#include "horovod_cpp/types.h"

namespace hvd {

/// One piece of a logical vector reduced in place.
struct Segment {
  void* data;
  int64_t count;  ///< elements
};

class ShmAllreduce {
 public:
  /// Creates this rank's segment named from `tag` (unique per job and set, the same on every
  /// rank), `rank` of `size`, with two slots of `chunk_bytes`. The caller then runs a barrier
  /// and calls attach().
  static Status create(const std::string& tag, int rank, int size, int64_t chunk_bytes,
                       std::unique_ptr<ShmAllreduce>* out);
  ~ShmAllreduce();

  /// Maps every peer's segment (after all created theirs); then unlink() after a barrier.
  Status attach();
  /// Removes the names (the mappings stay), so nothing is left behind if the job dies.
  void unlink();
  /// Whether this rank can read every peer's memory directly (process_vm_readv, "CMA"): reads
  /// a word of each peer's segment through the peer's address space and compares.
  bool probe_single_copy() const;
  /// Broadcasts of at least `min_bytes`, and allgathers and alltoalls (their longest block
  /// times the ranks) of at least kGatherFactor times that, move with one copy, read straight
  /// from the peer's buffer, when they are below `max_bytes` (call only with the same values
  /// on every rank, after every rank's probe succeeded). The others take two copies through
  /// the segment: process_vm_readv pins and copies page by page (about 8 GB/s on the
  /// benchmark machine), slower there than two in-cache copies at every size. A two-copy
  /// broadcast is slower sooner (its readers wait for the root's copy, where an allgather's
  /// ranks copy side by side): hence the factor.
  void enable_single_copy(int64_t min_bytes, int64_t max_bytes) {
    single_copy_min_ = min_bytes;
    single_copy_max_ = max_bytes;
  }
  bool single_copy() const { return single_copy_min_ >= 0; }
  /// Lets broadcasts of at least `min_bytes`, and allgathers and alltoalls (longest block
  /// times the ranks) of at least that, outside the fixed single-copy window choose between
  /// one copy and two by measurement (gather_paths.h); call only after every rank's probe
  /// succeeded, with the same `min_bytes` on every rank. `test_seed`: GatherPaths::enable.
  /// (ShmTransport enables the allreduce's and reducescatter's choice of MPI through paths().)
  void enable_measured_paths(int64_t min_bytes, uint64_t test_seed) {
    paths_.enable(min_bytes, test_seed, GatherPaths::kGatherKinds);
  }
  /// The measured choice of ways: path_votes() go to each negotiation cycle (from every
  /// rank's published costs), and the agreed votes come back (paths().set_agreed()) before
  /// the cycle's collectives run (ShmTransport).
  GatherPaths& paths() { return paths_; }
  uint64_t path_votes();
  /// Records a timed call that paths().second_way() placed (GatherPaths::record) and
  /// publishes this rank's costs of its class for the peers' votes.
  void record_path(GatherPaths::Kind kind, int64_t bytes, bool second, double seconds) {
    paths_.record(kind, bytes, second, seconds);
    publish_path_costs(kind, bytes);
  }
  /// Ranks outnumber cores on this host: waits yield the core while they spin.
  void set_yield_core(bool yield) { yield_core_ = yield; }
  /// The peers' processes, checked by every wait that lasts (off until its setup()).
  PeerWatch& peer_watch() { return watch_; }
  /// Marks this rank as gone from the segment's collectives after an error on its side: every
  /// peer that waits for anything in one, now or later, fails within ~50 ms (a wait that
  /// lasts checks the marks with the peers' processes) instead of waiting for its deadline
  /// while this rank's process lives on (an elastic worker that reset, a rank reporting the
  /// error). Every error of this class's own collectives marks it; a caller whose host peers
  /// wait for a step of its own (hier's cross-host steps) marks it when that step fails. The
  /// mark stays: the segment serves no collective after it. The destructor leaves a mark too
  /// (a rank that failed elsewhere, in the negotiation say, and reset): a peer that still
  /// waits in a collective then fails it, and a peer's wait for a counter this rank set before
  /// it left still succeeds.
  void leave();
  /// Whether rank `r` has left, by any of the marks (leave(), its destructor, a failed wait).
  bool has_left(int r) const;

  /// Reduces the concatenation of `segs` (all of `dtype`) across ranks, in place; then
  /// multiplies floating-point results by `scale` and divides integer results by `divisor`
  /// (when > 1, truncating), as Average and postscale need; integer results are multiplied
  /// by `scale` (in double, truncated) instead when it is not 1.
  /// Vectors of at most kWholeBytes (and one slot) take one round with a single wait instead:
  /// every rank publishes its whole vector and folds all of them itself.
  Status allreduce(const std::vector<Segment>& segs, DataType dtype, ReduceOp op, double scale,
                   int64_t divisor);
  static constexpr int64_t kWholeBytes = 16 * 1024;

  /// Reduce-scatter (shm_reducescatter.cc): `in` is the concatenation of every rank's block
  /// (`counts[r]` elements each, the same on every rank); this rank's reduced block goes to
  /// `out`. Every contribution is multiplied by `prescale` first (when not 1); the result is
  /// then finished with `scale` and `divisor` as allreduce() does. In rounds of
  /// chunk_bytes / size per peer, one slot per round (alternating): each rank publishes the
  /// pieces of its peers' blocks once, then reduces its own piece from its input and the
  /// peers' slots straight into `out`. The input is never modified.
  Status reducescatter(const void* in, void* out, const std::vector<int64_t>& counts,
                       DataType dtype, ReduceOp op, double prescale, double scale,
                       int64_t divisor);

  // The collectives that only move bytes (shm_gather.cc). Each runs in rounds of one piece
  // (a slot's worth per block, or per pair for alltoall) through the two alternating slots,
  // so one rank copies piece k+1 in while its peers still copy piece k out: two copies per
  // byte, both of pieces that stay in cache. Every rank runs the same rounds. Blocks in the
  // single-copy window (enable_single_copy()), and calls for which the measured paths chose
  // one copy (enable_measured_paths()), go in one round, read from the peer's buffer.

  /// Copies `bytes` of `buf` on `root` to every rank's `buf`.
  Status broadcast(void* buf, int64_t bytes, int root);
  /// Concatenates every rank's block (`bytes[r]` bytes; `in` holds this rank's) into `out`,
  /// in rank order.
  Status allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes);
  /// Sends send[j] bytes (consecutive in `in`, in rank order) to rank j and receives recv[j]
  /// bytes from each rank j into `out`, in rank order. `longest` is the most bytes any rank
  /// sends any other rank (the same on every rank: it sets the number of rounds).
  /// `from[j]` is where, in rank j's input, the block for this rank starts.
  Status alltoallv(const void* in, const std::vector<int64_t>& send, void* out,
                   const std::vector<int64_t>& recv, const std::vector<int64_t>& from,
                   int64_t longest);

 private:
  struct Header;
  ShmAllreduce() = default;
  /// Counters of each rank's header: chunks published, reduced, collected (read out).
  enum Counter { kPublished = 0, kReduced = 1, kCollected = 2 };
  Status wait_all(int which, uint64_t target);
  Status wait_rank(int r, int which, uint64_t target);
  /// OK unless some peer has left (leave()): then an error naming it, and `r`, the rank this
  /// rank waited for.
  Status check_left(int r) const;
  /// The header's `left` marks, the stronger one named first in the peers' errors: the owner's
  /// wait failed on another rank's mark or death; the owner closed its segment (it shut down
  /// or reset: ~ShmAllreduce); an error of the owner's own (leave()). A mark only grows.
  static constexpr uint64_t kLeftInWake = 1, kLeftClosed = 2, kLeftOnError = 3;
  void mark_left(uint64_t how);
  /// leave(), then `s`: every error that starts on this rank (a deadline, a failed read).
  /// A wait failed by another rank's mark or death marks kLeftInWake instead.
  Status fail(Status s) {
    leave();
    return s;
  }
  /// Publishes `buf` of `bytes` (this rank's input of a single-copy round) and the round's
  /// counter.
  void publish_buffer(const void* buf, int64_t bytes, uint64_t s);
  /// Copies `bytes` at `offset` into rank r's published buffer to `out` (process_vm_readv);
  /// an error unless they lie within the bytes rank r published.
  Status read_peer(int r, int64_t offset, void* out, int64_t bytes);
  int read_peer_at(int r, uint64_t remote, void* out, int64_t bytes) const;
  /// One single-copy round: publishes `in` (`in_bytes`), reads bytes[j] at from[j] (0 when
  /// `from` is empty) of every peer j's published buffer into out + at[j], and returns once
  /// every rank is done reading (this rank's `in` may change after that).
  Status read_round(const void* in, int64_t in_bytes, const std::vector<int64_t>& from,
                    const std::vector<int64_t>& bytes, unsigned char* out,
                    const std::vector<int64_t>& at);
  /// allreduce() of a vector that fits a slot, in one round: publish it whole, wait, fold.
  Status allreduce_whole(const std::vector<Segment>& segs, DataType dtype, ReduceOp op,
                         double scale, int64_t divisor);
  static constexpr int64_t kGatherFactor = 8;
  /// Whether a call of `bytes` (`factor`: use_single_copy()) goes by single copy; `*timed`:
  /// the measured paths chose, and the call is to be timed for them.
  bool choose_single(GatherPaths::Kind kind, int64_t bytes, int64_t factor, bool* timed);
  /// Runs `run(single)` the chosen way, timing it for the measured paths where they chose.
  template <typename Run>
  Status run_way(GatherPaths::Kind kind, int64_t bytes, int64_t factor, Run&& run);
  /// Copies paths_.costs() of the class of `kind` and `bytes` (both ways) into this rank's
  /// header, for the peers' path_votes(), and marks the class as changed for this rank's.
  void publish_path_costs(GatherPaths::Kind kind, int64_t bytes);
  Status broadcast_single(void* buf, int64_t bytes, int root);
  Status broadcast_two(void* buf, int64_t bytes, int root);
  Status allgather_two(const unsigned char* src, unsigned char* dst,
                       const std::vector<int64_t>& bytes, const std::vector<int64_t>& at,
                       int64_t longest);
  Status alltoall_two(const unsigned char* src, const std::vector<int64_t>& send,
                      const std::vector<int64_t>& sat, unsigned char* dst,
                      const std::vector<int64_t>& recv, const std::vector<int64_t>& rat,
                      int64_t longest);
  bool use_single_copy(int64_t bytes, int64_t factor) const {
    return single_copy_min_ >= 0 && bytes >= single_copy_min_ * factor &&
           (single_copy_max_ <= 0 || bytes < single_copy_max_);
  }
  /// Sets this rank's counter `which` to `value` (release: peers then see the slot's bytes).
  void signal(int which, uint64_t value);

  /// A round through the slots: its number, its slot (rounds alternate) and where in that
  /// slot its `bytes` start.
  struct Round {
    uint64_t s;
    int which;
    int64_t at;
  };
  /// Starts the next round of `bytes` (at most a slot; every rank starts the same rounds with
  /// the same sizes, so every rank places them alike). The rounds of a slot advance through
  /// it like a ring instead of all starting at its first byte: a rank that rewrites lines its
  /// peers have just read waits for their caches to give them up (on the benchmark machine a
  /// 32 KiB copy into the slot took 4.8 us that way, 1.7 us into lines last written a ring
  /// ago). Safe anywhere in the slot: a slot is rewritten only once every peer has collected
  /// the round before the last.
  Round next_round(int64_t bytes);
  /// Rounds below this many bytes all start at their slot's first byte: rewriting a few lines
  /// in place measured faster than fresh lines each round (broadcast 4 KiB 0.55x MPI in place,
  /// 0.79x through the ring), while from 8 KiB up the ring wins.
  static constexpr int64_t kRingMinBytes = 8 * 1024;
  unsigned char* slot(int rank, const Round& r) const;
  Header* header(int rank) const;

  std::string tag_;
  int rank_ = 0, size_ = 1;
  int64_t chunk_bytes_ = 0;
  int64_t single_copy_min_ = -1;  // < 0: off
  int64_t single_copy_max_ = 0;   // <= 0: no upper bound
  bool yield_core_ = true;
  size_t map_bytes_ = 0;
  std::vector<unsigned char*> maps_;  // every rank's segment, mine included
  std::vector<int64_t> pids_;         // every rank's process, read at attach()
  uint64_t step_ = 0;                 // chunks done (the same count on every rank)
  int64_t cursor_[2] = {0, 0};        // where each slot's next round starts
  bool unlinked_ = false;
  /// allreduce()'s segment offsets, kept between calls: a fused batch of a thousand tiny
  /// tensors needs 8 KiB, and glibc serves an allocation that large by first merging every
  /// small block freed since (malloc_consolidate), ~70,000 instructions a cycle in workload d.
  std::vector<int64_t> starts_;
  GatherPaths paths_;  // off unless enable_measured_paths()
  PeerWatch watch_;    // off unless make_shm_allreduce() turned it on
  /// The classes (bit GatherPaths::bit()) timed since path_votes() last counted. Every rank
  /// times the same calls, so these are the classes whose costs the peers changed too: the
  /// only ones path_votes() reads again from their headers (each a cache line that the peer
  /// has just written; reading every class cost a line transfer per 8 costs per peer) and
  /// counts again.
  uint64_t costs_changed_ = 0;
  GatherPaths::Costs slowest_;  // the slowest rank's costs, each class as last counted
  uint64_t votes_ = 0;          // path_votes()'s last count
};

}  // namespace hvd
