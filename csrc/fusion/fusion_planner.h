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

  const std::vector<FusionBatch>& plan(const std::vector<Response>& responses, int64_t threshold);

 private:
  struct Scratch;  // the lookup tables of one plan (fusion_planner.cc)
  std::unique_ptr<Scratch> scratch_;
  std::vector<FusionBatch> batches_, spare_;
};

}  // namespace hvd
