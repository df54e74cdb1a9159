// Copyright horovod_cpp authors.
#include "fusion/fusion_planner.h"

#include <map>
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
  std::vector<FusionBatch> batches;
  std::map<FuseKey, size_t> open;  // key -> index of the batch still accepting members
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    const bool fusable = r.ok() && r.op == OpType::kAllreduce;
    const int64_t bytes = fusable ? r.nbytes_for_rank(0) : 0;
    if (!fusable || threshold <= 0 || bytes >= threshold) {
      FusionBatch b;
      b.members.push_back(i);
      b.offsets.push_back(0);
      b.bytes = bytes;
      batches.push_back(std::move(b));
      continue;
    }
    const FuseKey key = key_of(r);
    auto it = open.find(key);
    if (it != open.end() && batches[it->second].bytes + bytes <= threshold) {
      FusionBatch& b = batches[it->second];
      b.members.push_back(i);
      b.offsets.push_back(b.bytes);
      b.bytes += bytes;
      continue;
    }
    FusionBatch b;
    b.members.push_back(i);
    b.offsets.push_back(0);
    b.bytes = bytes;
    batches.push_back(std::move(b));
    open[key] = batches.size() - 1;
  }
  return batches;
}

}  // namespace hvd
