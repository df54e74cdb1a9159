// Copyright horovod_cpp authors.
#include "coordination/controller.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "common/logging.h"
#include "coordination/test_faults.h"
#include "coordination/validate.h"
#include "coordination/wire.h"

namespace hvd {
namespace {

// Flags of word 0, stored inverted (a cleared bit means "some rank says yes").
constexpr uint64_t kFullCycleFlag = 1ull << 0;
constexpr uint64_t kShutdownFlag = 1ull << 1;
constexpr uint64_t kStallReportFlag = 1ull << 2;
constexpr uint64_t kJoinedFlag = 1ull << 3;
// Bits kVoteShift.. hold the votes (Controller::set_votes), inverted like the flags.
constexpr int kVoteShift = 8;
static_assert(kVoteShift + Controller::kVoteBits <= 64, "the votes must fit the flags word");

inline bool test_bit(const std::vector<uint64_t>& v, size_t word0, uint32_t bit) {
  return (v[word0 + bit / 64] >> (bit % 64)) & 1ull;
}
inline void set_bit(std::vector<uint64_t>& v, size_t word0, uint32_t bit) {
  v[word0 + bit / 64] |= 1ull << (bit % 64);
}
inline void clear_bit(std::vector<uint64_t>& v, size_t word0, uint32_t bit) {
  v[word0 + bit / 64] &= ~(1ull << (bit % 64));
}

// Ranks of the set as messages name them: `names[r]` (global ranks) when given.
std::string ranks_str(const std::vector<int>& ranks, const std::vector<int>& names) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) {
    const size_t r = static_cast<size_t>(ranks[i]);
    os << (i ? "," : "") << (r < names.size() ? names[r] : ranks[i]);
  }
  if (ranks.size() > 16) os << ",... (" << ranks.size() << " ranks)";
  return os.str();
}

}  // namespace

Controller::Controller(ControlPlane* plane, const ControllerOptions& options, Clock clock)
    : plane_(plane), options_(options), clock_(std::move(clock)), cache_(options.cache_capacity) {
  if (!clock_) {
    clock_ = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
}

void Controller::absorb(std::vector<Request> incoming) {
  const size_t n = incoming.size();
  // Each request's cache bit, and whether the cached response matches it, looked up once.
  std::vector<std::optional<uint32_t>>& bit_of = bit_of_;
  std::vector<char>& clean_hit = clean_hit_;  // cached, matching, no local error
  bit_of.assign(n, std::nullopt);
  clean_hit.assign(n, 0);
  if (cache_.enabled()) {
    for (size_t i = 0; i < n; ++i) {
      const Request& q = incoming[i];
      // The position this name had last time, if it still holds it: no lookup by name (the
      // response is read by matches() anyway).
      const uint32_t h = q.cache_hint;
      bit_of[i] = h != kNoLocalTag && cache_.has_bit(h) && cache_.at(h).name == q.name
                      ? std::optional<uint32_t>(h)
                      : cache_.find(q.name);
      clean_hit[i] = bit_of[i] && q.error.empty() && cache_.at(*bit_of[i]).matches(q, plane_->rank());
    }
  }
  // Requests of one group are looked up together: the group is cached only if every member
  // is a clean hit; otherwise all its members go in full and their hits are invalidated.
  // A group's members are enqueued together, so they come as a run of equal keys: a key is
  // hashed once per run, not per member.
  std::vector<char>& group_clean = group_clean_;
  group_clean.assign(n, 1);
  std::vector<std::pair<size_t, size_t>>& runs = group_runs_;  // [begin, end) of one key
  runs.clear();
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    if (!incoming[i].group.empty()) {
      while (j < n && incoming[j].group == incoming[i].group) ++j;
      runs.emplace_back(i, j);
    }
    i = j;
  }
  std::unordered_map<std::string_view, bool> key_clean;  // views of the names
  for (const auto& run : runs) {
    bool& clean = key_clean.try_emplace(incoming[run.first].group, true).first->second;
    for (size_t i = run.first; i < run.second && clean; ++i) clean = clean_hit[i] != 0;
  }
  for (const auto& run : runs) {
    if (key_clean[incoming[run.first].group]) continue;
    for (size_t i = run.first; i < run.second; ++i) {
      group_clean[i] = 0;
      if (bit_of[i]) invalid_bits_.insert(*bit_of[i]);
    }
  }
  for (const Request& q : incoming) {
    if (q.op == OpType::kJoin) joined_ = true;
  }
  auto hit_of = [&](size_t i) -> std::optional<uint32_t> {
    const std::optional<uint32_t> bit = bit_of[i];
    // In full, and out of the cache, while a rank has joined (rank 0 must see who submitted
    // what; a rank that submits the same tensor after the join ended -- others_joined_ is a
    // cycle late -- would otherwise set its bit and wait for ever for this rank's bit, while
    // this rank's full request waits for its full one), and for a local error (every rank
    // must see it in full).
    if (others_joined_ || joined_ || !incoming[i].error.empty()) {
      if (bit) invalid_bits_.insert(*bit);
      return std::nullopt;
    }
    if (clean_hit[i] && !pending_bits_.contains(*bit)) return bit;
    if (bit) invalid_bits_.insert(*bit);  // cached with other parameters
    return std::nullopt;
  };
  for (size_t i = 0; i < n; ++i) {
    Request& q = incoming[i];
    std::optional<uint32_t> bit = group_clean[i] ? hit_of(i) : std::nullopt;
    if (bit) {
      pending_bits_.put(*bit, std::move(q));
    } else {
      uncached_.push_back(std::move(q));
    }
  }
  incoming.clear();
  spare_requests_ = std::move(incoming);
}

// Removes `bit` from the cache (all ranks do this in the same cycle). This rank's pending
// request on it, and on the rest of its group, will be sent in full instead.
void Controller::drop_bit(uint32_t bit) {
  requeue_pending(bit);
  cache_.erase(bit);
  partial_since_.erase(bit);
}

// Moves this rank's pending request on `bit` (and the rest of its group) to the requests sent
// in full. Leaves the cache alone: after an eviction the position may already hold a new entry.
void Controller::requeue_pending(uint32_t bit) {
  if (pending_bits_.contains(bit)) {
    const std::string group = pending_bits_.at(bit).group;
    uncached_.push_back(std::move(pending_bits_.at(bit)));
    pending_bits_.erase(bit);
    if (!group.empty()) {
      std::vector<uint32_t> siblings;
      pending_bits_.for_each([&](uint32_t b, Request& q) {
        if (q.group == group) siblings.push_back(b);
      });
      for (uint32_t b : siblings) {
        uncached_.push_back(std::move(pending_bits_.at(b)));
        pending_bits_.erase(b);
      }
    }
  }
}

Status Controller::run_cycle(std::vector<Request> incoming, bool shutdown_requested,
                             CycleResult* out) {
  *out = CycleResult();
  ++cycles_;
  if (shutdown_requested) shutdown_requested_ = true;
  absorb(std::move(incoming));

  const bool is_root = plane_->rank() == 0;
  const uint32_t nbits = cache_.num_bits();
  const uint32_t words = (nbits + 63) / 64;
  const size_t kReady = 1, kValid = 1 + words, kNone = 1 + 2 * words;
  std::vector<uint64_t>& v = words_;
  v.assign(1 + 3 * static_cast<size_t>(words), ~0ull);
  std::fill(v.begin() + kReady, v.begin() + kValid, 0ull);
  const bool want_report = is_root && want_stall_report_;
  if (!uncached_.empty() || shutdown_requested_ || want_report || !invalid_bits_.empty()) {
    v[0] &= ~kFullCycleFlag;
  }
  if (shutdown_requested_) v[0] &= ~kShutdownFlag;
  if (want_report) v[0] &= ~kStallReportFlag;
  if (joined_) v[0] &= ~kJoinedFlag;
  v[0] &= ~(votes_ << kVoteShift);
  pending_bits_.for_each([&](uint32_t bit, const Request&) {
    set_bit(v, kReady, bit);
    clear_bit(v, kNone, bit);
  });
  for (uint32_t bit : invalid_bits_) clear_bit(v, kValid, bit);
  invalid_bits_.clear();

  HVD_RETURN_IF_ERROR(plane_->allreduce_and(&v));

  const bool full = !(v[0] & kFullCycleFlag);
  const bool stall_report = !(v[0] & kStallReportFlag);
  others_joined_ = !(v[0] & kJoinedFlag);
  out->votes = (~v[0] >> kVoteShift) & kTransportVoteMask;
  if (others_joined_) {
    // Cache hits cannot complete while a rank has joined (it sets no bits): send them in full.
    pending_bits_.for_each([&](uint32_t, Request& q) { uncached_.push_back(std::move(q)); });
    pending_bits_.clear();
  }

  // 3. Invalidations, then the bits ready everywhere.
  for (uint32_t bit = 0; bit < nbits; ++bit) {
    if (!test_bit(v, kValid, bit) && cache_.has_bit(bit)) {
      clear_bit(v, kReady, bit);
      drop_bit(bit);
    }
  }
  std::vector<uint32_t>& ready = ready_;
  ready.clear();
  // Ready members per group (views of the cached responses' names, stable in this function).
  // Members of a group are mostly adjacent: the last group counted is tried before the map.
  std::unordered_map<std::string_view, int> group_ready;
  int* last_count = nullptr;
  std::string_view last_group;
  const auto count_of = [&](const std::string& group) -> int& {
    if (!last_count || last_group != group) {
      last_group = group;
      last_count = &group_ready[last_group];
    }
    return *last_count;
  };
  for (uint32_t bit = 0; bit < nbits; ++bit) {
    if (test_bit(v, kReady, bit) && cache_.has_bit(bit)) {
      ready.push_back(bit);
      const Response& r = cache_.at(bit);
      if (!r.group.empty()) ++count_of(r.group);
    }
  }
  std::vector<Response>& hits = out->responses;
  size_t n = 0;
  if (!ready.empty()) {
    hits.swap(spare_responses_);  // copy-assigned below: no allocation when the room fits
    hits.reserve(ready.size());
    out->hits.swap(spare_hits_);
    out->hits.clear();
    out->hits.reserve(ready.size());
  }
  for (uint32_t bit : ready) {
    const Response& r = cache_.at(bit);
    if (!r.group.empty() && count_of(r.group) < r.group_size) continue;  // wait for siblings
    if (n < hits.size()) {
      // In steady state the same bits are ready in the same order every cycle: the spare at
      // n is usually this very entry's copy from the last cycle (3 strings, 3 vectors).
      if (hits[n].cache_stamp != r.cache_stamp) hits[n] = r;
    } else if (!spare_extra_.empty()) {
      hits.push_back(std::move(spare_extra_.back()));
      spare_extra_.pop_back();
      hits.back() = r;
    } else {
      hits.push_back(r);
    }
    ++n;
    // Ready everywhere means pending here too; kNoLocalTag sends the caller to the name.
    out->hits.push_back(
        {pending_bits_.contains(bit) ? pending_bits_.at(bit).local_tag : kNoLocalTag, bit});
    pending_bits_.erase(bit);
    cache_.touch(bit);
  }
  keep_spares(hits, n);
  if (is_root) update_stall_state(v, words);

  // 4. The full cycle, when any rank needs it.
  if (full) {
    ++full_cycles_;
    out->full_cycle = true;
    HVD_RETURN_IF_ERROR(full_cycle(stall_report, out));
  }
  return Status::OK();
}

void Controller::keep_spares(std::vector<Response>& v, size_t from) {
  constexpr size_t kMaxSpares = 4096;  // the default cache capacity: hits never exceed it
  for (size_t i = from; i < v.size() && spare_extra_.size() < kMaxSpares; ++i) {
    spare_extra_.push_back(std::move(v[i]));
  }
  v.resize(std::min(from, v.size()));
}

Status Controller::full_cycle(bool stall_report, CycleResult* out) {
  RequestList mine;
  mine.requests = std::move(uncached_);
  uncached_.clear();
  if (requests_sent_ && !mine.requests.empty()) requests_sent_(mine.requests);
  mine.shutdown = shutdown_requested_;
  if (stall_report) {
    pending_bits_.for_each(
        [&](uint32_t bit, const Request&) { mine.pending_cache_bits.push_back(bit); });
  }
  std::vector<std::string> gathered;
  HVD_RETURN_IF_ERROR(plane_->gather(serialize(mine), &gathered));

  std::string blob;
  if (plane_->rank() == 0) {
    std::vector<RequestList> lists(gathered.size());
    std::string undecodable;
    for (size_t r = 0; r < gathered.size(); ++r) {
      Status s = deserialize(gathered[r], &lists[r]);
      if (!s.ok()) {
        undecodable += (undecodable.empty() ? "" : "; ") + std::string("rank ") +
                       std::to_string(r) + ": " + s.message() + " (" +
                       std::to_string(gathered[r].size()) + " bytes)";
      }
    }
    if (undecodable.empty()) {
      blob = serialize(coordinate(lists, stall_report));
    } else {
      // Every other rank is waiting in the broadcast: it must still happen, carrying the end.
      ResponseList fail;
      fail.shutdown = fail.fatal = true;
      fail.shutdown_reason = "horovod_cpp stopped: rank 0 could not decode the requests of " +
                             undecodable +
                             " (different horovod_cpp versions, or memory corruption)";
      blob = serialize(fail);
    }
  }
  HVD_RETURN_IF_ERROR(plane_->broadcast(&blob));
  ResponseList list;
  HVD_RETURN_IF_ERROR(deserialize(blob, &list));
  HVD_RETURN_IF_ERROR(check_response_list(list, plane_->size()));
  // Before anything is cached or sized from them (response_agreement.cc).
  if (response_check_ && !list.responses.empty()) {
    HVD_RETURN_IF_ERROR(agree_on_responses(&list.responses));
  }

  for (Response& r : list.responses) {
    if (r.op == OpType::kJoin) joined_ = false;
    if (r.ok() && cache_.enabled() && r.op != OpType::kJoin) {
      std::optional<uint32_t> evicted;
      cache_.put(r, &evicted);
      if (evicted) {
        // Same eviction on every rank: a request pending on that bit is re-sent in full. Not
        // drop_bit(): put() reuses the lowest free position, often the evicted one, so erasing
        // it would remove `r` again, on the ranks with a pending request only.
        requeue_pending(*evicted);  // also moves group siblings
        partial_since_.erase(*evicted);
      }
    }
    out->responses.push_back(std::move(r));
  }
  if (list.shutdown) {
    out->shutdown = true;
    out->fatal = list.fatal;
    out->shutdown_reason = list.shutdown_reason;
  }
  return Status::OK();
}

ResponseList Controller::coordinate(const std::vector<RequestList>& lists, bool stall_report) {
  ResponseList out;
  const int n = static_cast<int>(lists.size());
  const double now = clock_();
  std::vector<int> shutdown_ranks;
  for (int r = 0; r < n; ++r) {
    if (lists[r].shutdown) shutdown_ranks.push_back(r);
    for (const Request& q : lists[r].requests) {
      if (q.op == OpType::kJoin) last_joined_ = r;
      if (on_request_) on_request_(q.name, r);
      TableEntry& e = table_[q.name];
      if (e.by_rank.empty()) {
        e.by_rank.resize(static_cast<size_t>(n));
        e.first_seen = now;
      }
      if (!e.by_rank[static_cast<size_t>(r)]) ++e.count;
      e.by_rank[static_cast<size_t>(r)] = q;
      if (e.count == n) {
        std::string name = q.name;
        emit_ready(name, e, &out.responses);
        table_.erase(name);
      }
    }
  }
  emit_ready_with_joined(n, &out.responses);
  if (!options_.test_corrupt_response.empty()) {
    for (Response& r : out.responses) {
      corrupt_response_for_test(&r, options_.test_corrupt_response, n);
    }
  }
  if (stall_report) {
    bool stall_shutdown = false;
    std::string report = build_stall_report(lists, now, &stall_shutdown);
    if (stall_shutdown) {
      out.shutdown = true;
      out.fatal = true;  // a rank is stuck: it will not reach a clean shutdown
      out.shutdown_reason = "horovod_cpp shut down after a stall of more than " +
                            seconds_str(options_.stall_shutdown_seconds) +
                            " (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS): " + report;
    }
  }
  if (!shutdown_ranks.empty() && !out.shutdown) {
    out.shutdown = true;
    out.shutdown_reason = std::string("horovod_cpp was shut down: ") +
                          (shutdown_ranks.size() == 1 ? "rank " : "ranks ") +
                          ranks_str(shutdown_ranks, options_.rank_names) + " called shutdown()";
  }
  return out;
}

void Controller::emit_ready(const std::string& /*name*/, TableEntry& entry,
                            std::vector<Response>* out) {
  std::vector<const Request*> reqs;
  reqs.reserve(entry.by_rank.size());
  for (auto& q : entry.by_rank) reqs.push_back(q ? &*q : nullptr);
  Response resp = build_response(reqs, options_.rank_names);
  if (resp.op == OpType::kJoin) resp.root = last_joined_;
  if (resp.group.empty() || resp.group_size <= 1) {
    out->push_back(std::move(resp));
    return;
  }
  const std::string key = resp.group;
  auto& held = held_groups_[key];
  held.push_back(std::move(resp));
  if (static_cast<int>(held.size()) < held.front().group_size) return;
  // The whole group is ready: it runs together, or fails together.
  std::string first_error;
  for (const auto& r : held) {
    if (!r.ok() && first_error.empty()) first_error = r.error;
  }
  for (auto& r : held) {
    if (!first_error.empty() && r.ok()) {
      r.error = std::string(op_type_name(r.op)) + " '" + r.name +
                "': another tensor of its group failed: " + first_error;
    }
    out->push_back(std::move(r));
  }
  held_groups_.erase(key);
}

// Rank 0: while some ranks have joined, a tensor submitted by every other rank is ready (the
// joined ranks take part with zeros, or it fails if it is not an allreduce).
void Controller::emit_ready_with_joined(int n, std::vector<Response>* out) {
  auto join = table_.find(kJoinName);
  if (join == table_.end()) return;
  const std::vector<std::optional<Request>>& joined = join->second.by_rank;
  std::vector<std::string> ready;
  for (auto& [name, e] : table_) {
    if (name == kJoinName) continue;
    int have = 0;
    for (int r = 0; r < n; ++r) {
      have += e.by_rank[static_cast<size_t>(r)] || joined[static_cast<size_t>(r)];
    }
    if (have == n) ready.push_back(name);
  }
  std::sort(ready.begin(), ready.end(), [this](const std::string& a, const std::string& b) {
    return table_[a].first_seen < table_[b].first_seen ||
           (table_[a].first_seen == table_[b].first_seen && a < b);
  });
  for (const auto& name : ready) {
    emit_ready(name, table_[name], out);
    table_.erase(name);
  }
}

void Controller::update_stall_state(const std::vector<uint64_t>& v, uint32_t words) {
  const double now = clock_();
  const size_t kReady = 1, kNone = 1 + 2 * static_cast<size_t>(words);
  // Word at a time: in steady state almost every word is all-ready or all-idle.
  const uint32_t nbits = cache_.num_bits();
  double oldest = partial_since_.update(
      words,
      [&](uint32_t w) {
        uint64_t live = 0;
        for (uint64_t p = ~v[kReady + w] & ~v[kNone + w]; p; p &= p - 1) {
          const int b = __builtin_ctzll(p);
          const uint32_t bit = w * 64 + static_cast<uint32_t>(b);
          if (bit < nbits && cache_.has_bit(bit)) live |= 1ull << b;
        }
        return live;
      },
      now);
  for (const auto& [name, e] : table_) oldest = std::min(oldest, e.first_seen);
  const double age = now - oldest;
  const bool check_due = !options_.stall_check_disabled && age >= options_.stall_check_seconds &&
                         now - last_stall_report_time_ >= options_.stall_check_seconds;
  const bool shutdown_due =
      options_.stall_shutdown_seconds > 0 && age >= options_.stall_shutdown_seconds;
  want_stall_report_ = check_due || shutdown_due;
}

}  // namespace hvd

namespace hvd {

// Rank 0, in a full cycle that every rank joined with its pending cache bits: one line per
// stalled tensor with the ranks that submitted it and the ranks that did not.
std::string Controller::build_stall_report(const std::vector<RequestList>& lists, double now,
                                     bool* shutdown) {
  const int n = static_cast<int>(lists.size());
  const double min_age = options_.stall_check_disabled
                             ? options_.stall_shutdown_seconds
                             : (options_.stall_shutdown_seconds > 0
                                    ? std::min(options_.stall_check_seconds,
                                               options_.stall_shutdown_seconds)
                                    : options_.stall_check_seconds);
  std::ostringstream os;
  int stalled = 0;
  auto add = [&](const std::string& what, double age, const std::vector<int>& have) {
    std::vector<int> missing;
    for (int r = 0; r < n; ++r) {
      if (!std::binary_search(have.begin(), have.end(), r)) missing.push_back(r);
    }
    os << (stalled++ ? "; " : "") << what << " waited " << static_cast<long long>(age)
       << " s: submitted by " << (have.size() == 1 ? "rank " : "ranks ")
       << ranks_str(have, options_.rank_names) << ", missing on "
       << (missing.size() == 1 ? "rank " : "ranks ") << ranks_str(missing, options_.rank_names);
    if (options_.stall_shutdown_seconds > 0 && age >= options_.stall_shutdown_seconds) {
      *shutdown = true;
    }
  };
  std::vector<std::pair<double, std::string>> entries;
  for (const auto& [name, e] : table_) entries.push_back({e.first_seen, name});
  std::sort(entries.begin(), entries.end());
  for (const auto& [first_seen, name] : entries) {
    const TableEntry& e = table_[name];
    if (now - first_seen < min_age) continue;
    std::vector<int> have;
    OpType op = OpType::kAllreduce;
    for (int r = 0; r < n; ++r) {
      if (e.by_rank[static_cast<size_t>(r)]) {
        have.push_back(r);
        op = e.by_rank[static_cast<size_t>(r)]->op;
      }
    }
    add(std::string(op_type_name(op)) + " '" + name + "'", now - first_seen, have);
  }
  partial_since_.for_each([&](uint32_t bit, double since) {
    if (now - since < min_age || !cache_.has_bit(bit)) return;
    std::vector<int> have;
    for (int r = 0; r < n; ++r) {
      const auto& bits = lists[static_cast<size_t>(r)].pending_cache_bits;
      if (std::find(bits.begin(), bits.end(), bit) != bits.end()) have.push_back(r);
    }
    const Response& resp = cache_.at(bit);
    add(std::string(op_type_name(resp.op)) + " '" + resp.name + "'", now - since, have);
  });
  last_stall_report_time_ = now;
  want_stall_report_ = false;
  if (stalled == 0) return "";
  last_stall_report_ = os.str();
  HVD_LOG(kWarning) << "stalled collectives: some ranks submitted tensors that others have "
                       "not submitted (a rank may be stuck or running different code): "
                    << last_stall_report_;
  return last_stall_report_;
}

}  // namespace hvd
