// Copyright horovod_cpp authors. Which way a large collective on one host moves its bytes:
// chosen by measurement, agreed by every rank.
//
// Each class of call (collective x size band) has two ways, the first the default:
//  - broadcast, allgather, alltoall (shm_gather.cc): two copies through the segments (each
//    block's owner copies a piece into its slot, the readers copy it out), or one copy
//    straight from the owner's buffer (process_vm_readv);
//  - allreduce, reducescatter (shm_transport.cc): the shm fold (shm_allreduce.h), or the MPI
//    data plane under the shm transport (Open MPI's own shared-memory transport; offered only
//    where the set's data plane is MPI: Gloo's is TCP, never faster than the segments);
//  - broadcast, allgather, alltoall, once more (shm_transport.cc): through the segments (by
//    the way kBroadcast, kAllgather or kAlltoall chooses) or by MPI, as the reductions. These
//    only move bytes: MPI gives the same result at any size of set and in any dtype.
// Which is faster depends on the machine and, on a VM, on the moment: on the benchmark VM two
// copies run at 0.4-0.9x raw MPI most of the time and at 1.5-5.5x for stretches of seconds to
// minutes, while single copies stay at 0.8-1.3x throughout (docs/benchmarks-history.md, round
// fifteen); the fold's allreduce beats MPI by far from 1 MiB in the VM's fast state and loses
// to it in the slow one, and at 256 KiB in both (issue 41). A fixed choice loses either way.
//
// So every rank times the calls of each class: the way in use on every call, the other way on
// calls 1-3 and every kExplorePeriod-th call. Every rank publishes these costs (ShmAllreduce's
// header) and votes, per class, for the way whose slowest rank is faster (a collective ends
// with its slowest rank: a broadcast's root, for one, finishes a two-copy call early). The
// votes go to the next negotiation cycle, which ORs them across ranks (Controller::set_votes,
// CycleResult::votes), and every rank then takes the agreed way (set_agreed()). Both the
// agreed mask and the call counts that pick the exploring calls are the same on every rank,
// so every rank takes the same way for the same call, as the collective requires: the two
// ways do not mix within one call.
//
// Pure bookkeeping (no clock, no shared memory): the caller times the calls.
#pragma once

#include <cstdint>

namespace hvd {

class GatherPaths {
 public:
  /// kBroadcast, kAllgather, kAlltoall: two copies or one. kAllreduce, kReducescatter: the
  /// fold or MPI. kBroadcastPlane, kAllgatherPlane, kAlltoallPlane: the segments (either copy
  /// way, as kBroadcast, kAllgather, kAlltoall choose) or MPI.
  enum Kind {
    kBroadcast = 0,
    kAllgather = 1,
    kAlltoall = 2,
    kAllreduce = 3,
    kReducescatter = 4,
    kBroadcastPlane = 5,
    kAllgatherPlane = 6,
    kAlltoallPlane = 7
  };
  static constexpr int kKinds = 8;
  /// Masks of kinds (bit `kind`) for enable(): the ones that choose between one copy and two,
  /// and the ones that choose between the segments and MPI.
  static constexpr uint32_t kGatherKinds = 0x7;
  static constexpr uint32_t kMpiKinds = 0xf8;
  /// Size bands from the smallest size chosen: [m, 4m), [4m, 16m), [16m, 64m), [64m, ...).
  static constexpr int kBands = 4;
  /// Vote bits: bit kind * kBands + band is set for the second way (one copy, MPI).
  static constexpr int kVoteBits = kKinds * kBands;
  static_assert(kVoteBits < 64, "the votes are a 64-bit word");
  static constexpr uint64_t kVoteMask = (uint64_t{1} << kVoteBits) - 1;
  /// One call of every this many of a class takes the way not in use (and so do its calls 1-3,
  /// so that both ways are timed early; a way's first call is not counted).
  static constexpr uint64_t kExplorePeriod = 32;
  /// Counted calls of each way before this rank votes for a class.
  static constexpr uint64_t kMinSamples = 2;
  /// Counted calls of each class and way that costs() takes the fastest of.
  static constexpr int kWindow = 4;
  /// Single copies replace two copies only when this many times faster (against switching on
  /// noise: on the benchmark VM they are 1.3-2x slower in its good times and up to 5x faster
  /// in its bad ones); two copies come back as soon as they are faster.
  static constexpr double kSwitchGain = 1.5;
  /// MPI replaces the segments when this many times faster (the goal is at most 1.1x raw MPI
  /// from 256 KiB); the segments come back as soon as they are faster.
  static constexpr double kMpiSwitchGain = 1.1;

  /// Calls of the `kinds` (a mask of bits 1 << kind, added to those enabled before) of at
  /// least `min_bytes` (<= 0: none) choose their way here; the same `min_bytes` and
  /// `test_seed` on every call. `test_seed` nonzero replaces the votes by pseudo-random ones
  /// drawn from it (tests: ranks then vote differently every cycle, and only the agreement
  /// keeps them together).
  void enable(int64_t min_bytes, uint64_t test_seed = 0, uint32_t kinds = kGatherKinds) {
    min_bytes_ = min_bytes;
    test_state_ = test_seed;
    kinds_ |= kinds;
  }
  bool enabled() const { return min_bytes_ > 0 && kinds_ != 0; }
  /// Tests: every call that chooses here takes way `way` (0: the first, 1: the second)
  /// whatever the votes; -1 (the default): the agreed way.
  void force(int way) { forced_ = way; }
  /// Whether votes() are the tests' random ones (drawn anew every call).
  bool test_votes() const { return test_state_ != 0; }

  /// The band of a call of `bytes`, or -1 when calls of that size do not choose here.
  int band(int64_t bytes) const;
  /// band(), or -1 when `kind` does not choose here.
  int band(Kind kind, int64_t bytes) const { return (kinds_ >> kind) & 1u ? band(bytes) : -1; }

  /// Whether this call of `kind` and `bytes` (band(kind, bytes) >= 0) takes the second way
  /// (one copy, MPI). Counts the call: call it exactly once per call, on every rank alike.
  bool second_way(Kind kind, int64_t bytes);

  /// Records how long a call that second_way() placed took on this rank.
  void record(Kind kind, int64_t bytes, bool second, double seconds);

  /// Seconds per byte by class and way: the fastest of the last kWindow counted calls (a
  /// call also waits for the last rank to arrive, which has nothing to do with the way: the
  /// fastest recent call is the way's own cost; 0: not measured yet).
  struct Costs {
    double c[kKinds][kBands][2] = {};
  };
  /// This rank's costs.
  const Costs& costs() const { return costs_; }
  /// Folds a peer's costs into `slowest`: slower() of each pair.
  static void fold_slowest(const Costs& peer, Costs* slowest);
  /// The slower of two ranks' costs of one class and way: the larger, or 0 (unmeasured) where
  /// either is.
  static double slower(double a, double b) { return a == 0.0 || b == 0.0 ? 0.0 : (a < b ? b : a); }

  /// This rank's votes for the next cycle (a bit per class, kVoteBits bits; only the enabled
  /// kinds' bits), from the slowest rank's costs (costs() folded with every peer's by
  /// fold_slowest()).
  uint64_t votes(const Costs& slowest);
  /// votes() counted again for the classes in `classes` only (bits as bit()): the other bits
  /// are `previous`'s (a class's vote depends on its own costs, calls and agreed way alone; the
  /// tests' random votes are drawn whole).
  uint64_t votes(const Costs& slowest, uint64_t classes, uint64_t previous);

  /// The votes every rank agreed on in this cycle (the OR of every rank's votes()).
  void set_agreed(uint64_t mask) { agreed_ = mask & kVoteMask; }
  uint64_t agreed() const { return agreed_; }

  static int bit(Kind kind, int band) { return static_cast<int>(kind) * kBands + band; }

 private:
  int64_t min_bytes_ = 0;
  uint64_t agreed_ = 0;
  uint32_t kinds_ = 0;  // enable()'s kinds
  int forced_ = -1;     // force()
  uint64_t test_state_ = 0;
  uint64_t calls_[kKinds][kBands] = {};
  uint64_t samples_[kKinds][kBands][2] = {};        // record()s by class and way
  double recent_[kKinds][kBands][2][kWindow] = {};  // the last counted calls, a ring
  Costs costs_;
};

}  // namespace hvd
