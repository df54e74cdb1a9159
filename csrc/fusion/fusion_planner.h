// Copyright horovod_cpp authors. The fusion plan: which responses run together, where.
//
// A pure function of the response list, so every rank computes the same plan without talking.
// Successful allreduces with the same dtype, device, reduce op and scale factors are packed,
// in response order, into batches of at most `threshold` bytes; every other response (and an
// allreduce that fits with nothing else) forms a batch of its own and runs in place, with no
// copy. Groups are not split across batches unless a group exceeds the threshold.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "coordination/message.h"

namespace hvd {

struct FusionBatch {
  std::vector<size_t> members;  ///< indices into the response list, in execution order
  std::vector<int64_t> offsets;  ///< byte offset of each member in the fusion buffer
  int64_t bytes = 0;             ///< total bytes
  bool fused() const { return members.size() > 1; }
};

/// Plans `responses` with a fusion buffer of `threshold` bytes (0 disables fusion).
std::vector<FusionBatch> plan_fusion(const std::vector<Response>& responses, int64_t threshold);

/// plan_fusion() for a caller that plans every cycle: the plan and the planner's scratch keep
/// their memory from one cycle to the next (a cycle of one tensor otherwise allocated six
/// times here). The returned plan is valid until the next plan().
class FusionPlanner {
 public:
  FusionPlanner();
  ~FusionPlanner();
  FusionPlanner(const FusionPlanner&) = delete;
  FusionPlanner& operator=(const FusionPlanner&) = delete;

  /// A cycle whose responses are all cached ones, the same entries in the same order as the
  /// last plan's (Response::cache_stamp: each cache entry's own number, renewed whenever the
  /// entry changes), with the same threshold, gets the last plan again without planning: a
  /// training step's gradients (a thousand tiny tensors cost ~200 instructions each here).
  const std::vector<FusionBatch>& plan(const std::vector<Response>& responses, int64_t threshold);

 private:
  /// True when `responses` and `threshold` are those of the last plan (see plan()).
  bool same_as_last(const std::vector<Response>& responses, int64_t threshold) const;

  struct Scratch;  // the lookup tables of one plan (fusion_planner.cc)
  std::unique_ptr<Scratch> scratch_;
  std::vector<FusionBatch> batches_, spare_;
  std::vector<uint64_t> last_stamps_;  // the last plan's responses, or empty if any uncached
  int64_t last_threshold_ = -1;
};

}  // namespace hvd
