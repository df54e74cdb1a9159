// Copyright horovod_cpp authors.
#include "fusion/fusion_planner.h"

#include <map>
#include <string>
#include <tuple>

namespace hvd {
namespace {

// Responses fuse only when they reduce the same way.
using FuseKey = std::tuple<uint8_t, uint8_t, int, uint8_t, double, double>;

FuseKey key_of(const Response& r) {
  return FuseKey(static_cast<uint8_t>(r.dtype), static_cast<uint8_t>(r.device.kind),
                 r.device.index, static_cast<uint8_t>(r.reduce_op), r.prescale, r.postscale);
}

}  // namespace

std::vector<FusionBatch> plan_fusion(const std::vector<Response>& responses, int64_t threshold) {
  auto fusable = [](const Response& r) { return r.ok() && r.op == OpType::kAllreduce; };
  // A group is kept in one batch when its fusable members of one key fit: the batch that takes
  // its first member reserves room for the rest (members need not be adjacent in the list).
  using GroupKey = std::pair<std::string, FuseKey>;
  std::map<GroupKey, int64_t> group_bytes;
  for (const Response& r : responses) {
    if (fusable(r) && !r.group.empty()) group_bytes[{r.group, key_of(r)}] += r.nbytes_for_rank(0);
  }
  std::map<GroupKey, size_t> group_batch;  // group -> the batch holding its room
  std::vector<int64_t> reserved;           // per batch: room promised to later group members

  std::vector<FusionBatch> batches;
  std::map<FuseKey, size_t> open;  // key -> index of the batch still accepting members
  auto start_batch = [&](size_t i, int64_t bytes) {
    FusionBatch b;
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
    const GroupKey gk{r.group, key};
    const bool keep_group = !r.group.empty() && group_bytes[gk] <= threshold;
    size_t target = batches.size();  // a new batch unless one below takes it
    if (auto g = group_batch.find(gk); keep_group && g != group_batch.end()) {
      target = g->second;  // a later member: its room is reserved
      reserved[target] -= bytes;
    } else {
      const int64_t need = keep_group ? group_bytes[gk] : bytes;
      auto it = open.find(key);
      if (it != open.end() && batches[it->second].bytes + reserved[it->second] + need <= threshold) {
        target = it->second;
      }
      if (keep_group) {
        group_batch[gk] = target;
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
      if (keep_group) reserved.back() = group_bytes[gk] - bytes;
      open[key] = target;
    }
  }
  return batches;
}

}  // namespace hvd
