// Copyright horovod_cpp authors. The controller: negotiation of which tensors run, per cycle.
//
// The protocol, run by every rank once per cycle of its background thread:
//
//  1. Each new request is looked up in the response cache. A hit whose parameters match is
//     held as a "pending bit"; anything else is queued to be sent in full ("uncached"). A hit
//     whose parameters changed also marks its bit invalid.
//  2. Every rank contributes to ONE bitwise-AND allreduce of a small word vector:
//       word 0      flags, stored inverted so AND computes "any rank": needs a full cycle,
//                   shutdown requested, rank 0 asks for a stall report;
//       W words     pending bits (AND: ready on every rank);
//       W words     inverted invalid bits (AND: no rank invalidated it);
//       W words     inverted pending bits (AND: pending on no rank; rank 0 uses it with the
//                   first set to see bits pending on some ranks only, for stall reports).
//     W = ceil(cache.num_bits() / 64), identical on every rank because the caches are.
//  3. Invalid bits are evicted everywhere; a rank whose pending bit was evicted re-sends that
//     request in full. Bits ready on every rank become responses, in bit order (a grouped
//     tensor only when its whole group is ready).
//  4. Only if some rank set the full-cycle flag: every rank sends its uncached requests to
//     rank 0 (gather); rank 0 adds them to its message table, and each tensor now submitted
//     by every rank is checked (validate.h) into a response, successful or an error naming the
//     ranks and values that differ, or the ranks that could not submit it (a request carrying
//     a local error); rank 0 broadcasts the response list. Every rank checks each response
//     against its own request (set_response_check(), response_check.h) and one more
//     allreduce_and agrees on the verdicts: a response any rank refused fails on every rank
//     (response_agreement.cc). Successful responses then enter every rank's cache in list
//     order. Rank 0 always broadcasts, even when it could not decode a
//     rank's requests (then the list is a fatal shutdown naming that rank): no rank is left
//     waiting in the broadcast.
//  5. Every rank executes the cached responses and then the broadcast ones, in order.
//
// In steady state (the same tensors every step) step 4 never runs: one allreduce of a few
// hundred bytes per cycle replaces the exchange of names. Rank 0 also watches for stalls:
// tensors submitted by some ranks but not all for HOROVOD_STALL_CHECK_TIME_SECONDS are logged
// with the missing ranks, and after HOROVOD_STALL_SHUTDOWN_TIME_SECONDS the job shuts down.
//
// Threading: a Controller is used by one thread at a time (whichever holds its set's cycle lock).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "coordination/message.h"
#include "coordination/response_cache.h"
#include "transport/control_plane.h"

namespace hvd {

struct ControllerOptions {
  uint32_t cache_capacity = 1024;
  double stall_check_seconds = 60.0;
  bool stall_check_disabled = false;
  double stall_shutdown_seconds = 0.0;  ///< 0: never shut down for a stall
  /// The global rank of each rank of the set, which error and stall messages name (empty:
  /// the set is the global one, whose ranks are global ranks).
  std::vector<int> rank_names;
  /// HOROVOD_CPP_TEST_CORRUPT_RESPONSE (tests only): rank 0 corrupts its responses to tensors
  /// named "hvd_corrupt.*" this way before broadcasting them (corrupt_response_for_test()).
  std::string test_corrupt_response;
};

/// A cache hit's response, tied back to this rank's request without its name.
struct LocalHit {
  uint32_t tag;  ///< the request's Request::local_tag
  uint32_t bit;  ///< the cache position it hit (the request's next Request::cache_hint)
};

/// What every rank executes after one cycle.
struct CycleResult {
  std::vector<Response> responses;
  /// hits[i] belongs to responses[i]: the cache hits come first, the responses of a full
  /// cycle (found by name) after them.
  std::vector<LocalHit> hits;
  bool shutdown = false;
  /// The shutdown ends the job (a stall, or a message rank 0 could not decode): see
  /// common/fatal.h.
  bool fatal = false;
  std::string shutdown_reason;
  bool full_cycle = false;  ///< the gather/broadcast of step 4 ran
  /// The votes of this cycle: a bit is set when some rank set it (Controller::set_votes).
  uint64_t votes = 0;
};

/// Rank 0: since when each cached bit has been ready on some ranks but not all (its tensor
/// may be stalled). Flat, by bit, with a mask per 64 bits: while one rank runs ahead of
/// another, a thousand bits can turn partial and back every cycle, and a tree node for each
/// cost more than the rest of their negotiation.
class PartialBits {
 public:
  /// Sets the partial bits to exactly those of `mask_of(w)` for each of `words` words (a bit
  /// newly partial starts its time at `now`); returns the oldest start, or `now`.
  template <typename MaskOf>
  double update(uint32_t words, MaskOf&& mask_of, double now) {
    mask_.resize(words, 0);  // bits past the cache's end are partial no more
    since_.resize(static_cast<size_t>(words) * 64, 0.0);
    double oldest = now;
    for (uint32_t w = 0; w < words; ++w) {
      const uint64_t m = mask_of(w);
      for (uint64_t fresh = m & ~mask_[w]; fresh; fresh &= fresh - 1) {
        since_[w * 64 + static_cast<uint32_t>(__builtin_ctzll(fresh))] = now;
      }
      mask_[w] = m;
      for (uint64_t live = m; live; live &= live - 1) {
        oldest = std::min(oldest, since_[w * 64 + static_cast<uint32_t>(__builtin_ctzll(live))]);
      }
    }
    return oldest;
  }
  /// Forgets `bit` (dropped or evicted from the cache).
  void erase(uint32_t bit) {
    if (bit / 64 < mask_.size()) mask_[bit / 64] &= ~(1ull << (bit % 64));
  }
  /// Calls f(bit, since) for every partial bit, lowest first.
  template <typename F>
  void for_each(F&& f) const {
    for (uint32_t w = 0; w < mask_.size(); ++w) {
      for (uint64_t m = mask_[w]; m; m &= m - 1) {
        const uint32_t bit = w * 64 + static_cast<uint32_t>(__builtin_ctzll(m));
        f(bit, since_[bit]);
      }
    }
  }

 private:
  std::vector<uint64_t> mask_;  // bit set: partial
  std::vector<double> since_;   // valid where the mask is set
};

/// This rank's requests that are cache hits, indexed by their bit: a flat table (bits are
/// dense, at most the cache capacity), so a hit costs no allocation or tree operation.
class PendingBits {
 public:
  bool empty() const { return count_ == 0; }
  bool contains(uint32_t bit) const { return bit < has_.size() && has_[bit]; }
  void put(uint32_t bit, Request&& q) {  // moved once, straight into its slot
    if (bit >= has_.size()) {
      has_.resize(bit + 1, 0);
      requests_.resize(bit + 1);
    }
    count_ += has_[bit] ? 0 : 1;
    has_[bit] = 1;
    requests_[bit] = std::move(q);
  }
  Request& at(uint32_t bit) { return requests_[bit]; }
  /// Forgets `bit` (its request is left to be overwritten by the next put()).
  void erase(uint32_t bit) {
    if (!contains(bit)) return;
    has_[bit] = 0;
    --count_;
  }
  void clear() {
    std::fill(has_.begin(), has_.end(), 0);
    count_ = 0;
  }
  /// Calls f(bit, request) for every pending bit, in increasing order.
  template <typename F>
  void for_each(F&& f) {
    for (uint32_t b = 0; b < has_.size() && count_ > 0; ++b) {
      if (has_[b]) f(b, requests_[b]);
    }
  }

 private:
  std::vector<uint8_t> has_;
  std::vector<Request> requests_;
  size_t count_ = 0;
};

class Controller {
 public:
  /// Monotonic seconds; injectable so stall handling is testable.
  using Clock = std::function<double()>;

  Controller(ControlPlane* plane, const ControllerOptions& options, Clock clock = {});

  /// Runs one cycle (collective: every rank calls it). `incoming`: requests enqueued on this
  /// rank since the last cycle. A grouped request's siblings must arrive in the same call.
  Status run_cycle(std::vector<Request> incoming, bool shutdown_requested, CycleResult* out);

  /// Bits a rank may set for the next cycles (set_votes()); CycleResult::votes has a bit set
  /// when any rank set it. They ride in the flags word of the bit vector every cycle already
  /// ANDs, so they cost nothing: the way for transports to make, by measurement, choices that
  /// every rank must make alike (TransportRegistry::path_votes()).
  static constexpr int kVoteBits = kTransportVoteBits;  // the transport contract's
  /// This rank's votes, sent with every cycle from the next one until changed.
  void set_votes(uint64_t votes) { votes_ = votes & kTransportVoteMask; }

  /// Hands back a finished cycle's responses and hits: the next cycle copies its cached
  /// responses into these (their strings and shapes keep their room), instead of allocating
  /// every one anew.
  void recycle(std::vector<Response>&& used, std::vector<LocalHit>&& hits) {
    if (hits.capacity() > spare_hits_.capacity()) spare_hits_.swap(hits);
    if (used.size() > spare_responses_.size()) spare_responses_.swap(used);
    keep_spares(used, 0);
  }

  /// The last cycle's request vector, emptied: the caller's next burst goes in it (it keeps
  /// its room), instead of a vector allocated every cycle.
  std::vector<Request> take_spare_requests() { return std::move(spare_requests_); }

  /// True while this rank has called join() and not every rank has.
  bool joined() const { return joined_; }
  /// True while this rank holds requests not yet turned into responses.
  bool has_pending() const { return !pending_bits_.empty() || !uncached_.empty(); }
  const ResponseCache& cache() const { return cache_; }
  uint64_t full_cycles() const { return full_cycles_; }
  uint64_t cycles() const { return cycles_; }
  /// Rank 0: called for every request as it reaches the coordinator (name, rank), e.g. to
  /// draw each rank's readiness on the timeline.
  void set_request_observer(std::function<void(const std::string&, int)> f) {
    on_request_ = std::move(f);
  }
  /// Rank 0's last stall report ("" if none yet).
  const std::string& last_stall_report() const { return last_stall_report_; }

  /// Fills problems[i] (sized like `responses`) with why successful response i does not run
  /// what this rank asked for (check_response_against_request()), or leaves it empty.
  using ResponseCheck = std::function<void(const std::vector<Response>& responses,
                                           std::vector<std::string>* problems)>;
  /// Makes every full cycle check its responses on every rank before they are cached or run:
  /// a response that any rank finds wrong fails on every rank, with what each such rank found
  /// (one more allreduce_and per full cycle that brings responses, and a gather and broadcast
  /// of the findings when there are some). Every rank of the set must set one, or none.
  void set_response_check(ResponseCheck check) { response_check_ = std::move(check); }
  /// Sees the requests this rank sends in full, before they go: only those can get a fresh
  /// response, so the record the ResponseCheck compares with is made from them here.
  using RequestsSent = std::function<void(const std::vector<Request>& requests)>;
  void set_requests_sent(RequestsSent f) { requests_sent_ = std::move(f); }

 private:
  struct TableEntry {
    std::vector<std::optional<Request>> by_rank;
    int count = 0;
    double first_seen = 0;
  };

  void absorb(std::vector<Request> incoming);
  void drop_bit(uint32_t bit);
  void requeue_pending(uint32_t bit);
  Status full_cycle(bool stall_report, CycleResult* out);
  ResponseList coordinate(const std::vector<RequestList>& lists, bool stall_report);
  void emit_ready(const std::string& name, TableEntry& entry, std::vector<Response>* out);
  void emit_ready_with_joined(int n, std::vector<Response>* out);
  std::string build_stall_report(const std::vector<RequestList>& lists, double now,
                           bool* shutdown);
  void update_stall_state(const std::vector<uint64_t>& v, uint32_t words);
  Status agree_on_responses(std::vector<Response>* responses);

  ControlPlane* plane_;
  std::function<void(const std::string&, int)> on_request_;
  ControllerOptions options_;
  Clock clock_;
  ResponseCheck response_check_;
  RequestsSent requests_sent_;
  ResponseCache cache_;

  // Every rank.
  PendingBits pending_bits_;  // this rank's cache hits, by bit
  std::set<uint32_t> invalid_bits_;           // to announce in the next cycle
  std::vector<Request> uncached_;             // to send in the next full cycle
  bool shutdown_requested_ = false;
  bool joined_ = false;         // this rank has a join pending
  bool others_joined_ = false;  // some rank had a join pending in the last cycle
  uint64_t cycles_ = 0, full_cycles_ = 0;
  uint64_t votes_ = 0;                     // set_votes()
  std::vector<Response> spare_responses_;  // recycle()d, for the next cycle's cache hits
  std::vector<LocalHit> spare_hits_;       // recycle()d, likewise
  /// Responses beyond what a cycle used, kept with their strings' and shapes' room (a cycle
  /// with more hits than the last takes them back instead of copy-constructing).
  std::vector<Response> spare_extra_;
  /// Moves v[from..] to spare_extra_ (up to a bound) and shrinks v to `from`.
  void keep_spares(std::vector<Response>& v, size_t from);
  // Scratch of every cycle, kept for its room (a cycle of one tensor allocated ~20 times).
  std::vector<Request> spare_requests_;            // absorb()'s emptied input
  std::vector<uint64_t> words_;                    // the negotiated bit vector
  std::vector<uint32_t> ready_;                    // bits ready everywhere
  std::vector<std::optional<uint32_t>> bit_of_;    // absorb(): each request's cache bit
  std::vector<char> clean_hit_, group_clean_;      // absorb(): per request
  std::vector<std::pair<size_t, size_t>> group_runs_;  // absorb(): runs of one group key

  // Rank 0 only.
  std::unordered_map<std::string, TableEntry> table_;
  std::map<std::string, std::vector<Response>> held_groups_;
  PartialBits partial_since_;  // cached bits pending on some ranks only
  bool want_stall_report_ = false;
  int last_joined_ = -1;
  double last_stall_report_time_ = -1e300;
  std::string last_stall_report_;
};

}  // namespace hvd
