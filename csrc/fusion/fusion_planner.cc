// Copyright horovod_cpp authors.
#include "fusion/fusion_planner.h"

#include <limits>
#include <string_view>
#include <unordered_map>

namespace hvd {
namespace {

// Responses fuse only when they reduce the same way.
struct FuseKey {
  DataType dtype;
  Device device;
  ReduceOp op;
  double prescale, postscale;
  bool operator==(const FuseKey& o) const {
    return dtype == o.dtype && device.kind == o.device.kind && device.index == o.device.index &&
           op == o.op && prescale == o.prescale && postscale == o.postscale;
  }
};

FuseKey key_of(const Response& r) { return {r.dtype, r.device, r.reduce_op, r.prescale, r.postscale}; }

constexpr size_t kNone = std::numeric_limits<size_t>::max();

// The batch still accepting members of each key. A cycle holds few distinct keys, mostly in
// runs: the last key found is tried first, then a short linear search.
class OpenBatches {
 public:
  size_t* find(const FuseKey& k) {
    if (last_ < items_.size() && items_[last_].first == k) return &items_[last_].second;
    for (size_t i = 0; i < items_.size(); ++i) {
      if (items_[i].first == k) {
        last_ = i;
        return &items_[i].second;
      }
    }
    return nullptr;
  }
  void clear() {
    items_.clear();
    last_ = 0;
  }
  void set(const FuseKey& k, size_t batch) {
    if (size_t* b = find(k)) {
      *b = batch;
      return;
    }
    items_.emplace_back(k, batch);
    last_ = items_.size() - 1;
  }

 private:
  std::vector<std::pair<FuseKey, size_t>> items_;
  size_t last_ = 0;
};

// One (group, key) of the cycle: the bytes of its fusable members and the batch holding its
// room. Members of a group are usually adjacent, so the last slot is tried before the map.
struct GroupSlot {
  std::string_view group;
  FuseKey key;
  int64_t bytes = 0;
  size_t batch = kNone;
  size_t next = kNone;  // the next slot of the same group name (another key)
};

class GroupSlots {
 public:
  size_t slot_of(const Response& r, const FuseKey& k) {
    const std::string_view g(r.group);
    if (last_ != kNone && slots_[last_].group == g && slots_[last_].key == k) return last_;
    auto [it, inserted] = heads_.try_emplace(g, slots_.size());
    size_t s = it->second;
    if (!inserted) {
      size_t prev = kNone;
      for (; s != kNone && !(slots_[s].key == k); s = slots_[s].next) prev = s;
      if (s == kNone) {
        s = slots_.size();
        slots_[prev].next = s;
      }
    }
    if (s == slots_.size()) slots_.push_back(GroupSlot{g, k});
    last_ = s;
    return s;
  }
  GroupSlot& operator[](size_t s) { return slots_[s]; }
  void clear() {
    slots_.clear();
    heads_.clear();
    last_ = kNone;
  }

 private:
  std::vector<GroupSlot> slots_;
  std::unordered_map<std::string_view, size_t> heads_;  // views of the responses' names
  size_t last_ = kNone;
};

}  // namespace

struct FusionPlanner::Scratch {
  GroupSlots groups;
  OpenBatches open;
  std::vector<size_t> slot;       // per response: its group's slot
  std::vector<int64_t> reserved;  // per batch: room promised to later group members
};

FusionPlanner::FusionPlanner() : scratch_(std::make_unique<Scratch>()) {}
FusionPlanner::~FusionPlanner() = default;

std::vector<FusionBatch> plan_fusion(const std::vector<Response>& responses, int64_t threshold) {
  FusionPlanner planner;
  return planner.plan(responses, threshold);
}

bool FusionPlanner::same_as_last(const std::vector<Response>& responses, int64_t threshold) const {
  if (threshold != last_threshold_ || responses.size() != last_stamps_.size()) return false;
  for (size_t i = 0; i < responses.size(); ++i) {
    if (responses[i].cache_stamp != last_stamps_[i]) return false;  // 0 (uncached) never stored
  }
  return !responses.empty();
}

const std::vector<FusionBatch>& FusionPlanner::plan(const std::vector<Response>& responses,
                                                    int64_t threshold) {
  if (same_as_last(responses, threshold)) return batches_;
  // Remembered for the next cycle only when every response is a cached one.
  last_threshold_ = threshold;
  last_stamps_.clear();
  for (const Response& r : responses) {
    if (r.cache_stamp == 0) {
      last_stamps_.clear();
      break;
    }
    last_stamps_.push_back(r.cache_stamp);
  }
  // Last cycle's batches become spare ones (their vectors keep their room).
  for (FusionBatch& b : batches_) spare_.push_back(std::move(b));
  batches_.clear();
  auto fusable = [](const Response& r) { return r.ok() && r.op == OpType::kAllreduce; };
  // A group is kept in one batch when its fusable members of one key fit: the batch that takes
  // its first member reserves room for the rest (members need not be adjacent in the list).
  Scratch& s = *scratch_;
  GroupSlots& groups = s.groups;
  groups.clear();
  std::vector<size_t>& slot = s.slot;
  slot.assign(responses.size(), kNone);
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    if (!fusable(r) || r.group.empty()) continue;
    slot[i] = groups.slot_of(r, key_of(r));
    groups[slot[i]].bytes += r.nbytes_for_rank(0);
  }
  std::vector<int64_t>& reserved = s.reserved;
  reserved.clear();

  std::vector<FusionBatch>& batches = batches_;
  OpenBatches& open = s.open;
  open.clear();
  auto start_batch = [&](size_t i, int64_t bytes) {
    FusionBatch b;
    if (!spare_.empty()) {
      b = std::move(spare_.back());
      spare_.pop_back();
      b.members.clear();
      b.offsets.clear();
    }
    b.members.push_back(i);
    b.offsets.push_back(0);
    b.bytes = bytes;
    batches.push_back(std::move(b));
    reserved.push_back(0);
  };
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    const int64_t bytes = fusable(r) ? r.nbytes_for_rank(0) : 0;
    if (!fusable(r) || threshold <= 0 || bytes >= threshold) {
      start_batch(i, bytes);
      continue;
    }
    const FuseKey key = key_of(r);
    GroupSlot* g = slot[i] == kNone ? nullptr : &groups[slot[i]];
    const bool keep_group = g && g->bytes <= threshold;
    size_t target = batches.size();  // a new batch unless one below takes it
    if (keep_group && g->batch != kNone) {
      target = g->batch;  // a later member: its room is reserved
      reserved[target] -= bytes;
    } else {
      const int64_t need = keep_group ? g->bytes : bytes;
      const size_t* o = open.find(key);
      if (o && batches[*o].bytes + reserved[*o] + need <= threshold) target = *o;
      if (keep_group) {
        g->batch = target;
        if (target < reserved.size()) reserved[target] += need - bytes;
      }
    }
    if (target < batches.size()) {
      FusionBatch& b = batches[target];
      b.members.push_back(i);
      b.offsets.push_back(b.bytes);
      b.bytes += bytes;
    } else {
      start_batch(i, bytes);
      if (keep_group) reserved.back() = g->bytes - bytes;
      open.set(key, target);
    }
  }
  if (spare_.size() > 64) spare_.resize(64);  // a large cycle's batches are not all kept
  return batches;
}

}  // namespace hvd
