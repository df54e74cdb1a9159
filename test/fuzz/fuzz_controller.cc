// Copyright horovod_cpp authors. Fuzz target: the negotiation fed with bytes from other ranks.
//
// One Controller runs a few cycles over a scripted ControlPlane whose collectives return
// fuzzer bytes where a real plane would return other ranks' data:
//   - the AND of the bit-vector allreduce (flags and cache bits: the cache bit vectors),
//   - as rank 0: the RequestList of every other rank in the gather (then every request goes
//     through validation and the message table),
//   - as another rank: rank 0's ResponseList in the broadcast (then into the response cache).
// Its own requests also come from the input, so the cache fills and hits. Rank 0 must always
// be able to decode the ResponseList it encoded itself; nothing may crash, read out of bounds,
// overflow or hang.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/logging.h"
#include "transport/control_plane.h"
#include "coordination/controller.h"
#include "coordination/wire.h"
#include "fuzz_input.h"

namespace {

using hvd::Status;

class ScriptedPlane : public hvd::ControlPlane {
 public:
  ScriptedPlane(hvd::fuzz::FuzzInput* in, int rank, int size) : in_(in), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allreduce_and(std::vector<uint64_t>* words) override {
    for (auto& w : *words) w &= in_->word();
    return Status::OK();
  }
  Status gather(const std::string& mine, std::vector<std::string>* all) override {
    if (rank_ != 0) return Status::OK();
    all->assign(static_cast<size_t>(size_), std::string());
    (*all)[0] = mine;
    for (int r = 1; r < size_; ++r) (*all)[static_cast<size_t>(r)] = in_->piece();
    return Status::OK();
  }
  Status broadcast(std::string* blob) override {
    if (rank_ == 0) {
      // What rank 0 sends must be what every rank can decode.
      hvd::ResponseList check;
      HVD_FUZZ_CHECK(hvd::deserialize(*blob, &check).ok());
    } else {
      *blob = in_->piece();
    }
    return Status::OK();
  }

 private:
  hvd::fuzz::FuzzInput* in_;
  int rank_, size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hvd::set_log_level(hvd::LogLevel::kFatal);  // stall reports would flood the output
  hvd::fuzz::FuzzInput in(data, size);
  const uint8_t setup = in.byte();
  const int ranks = 1 + (setup & 3);
  const int rank = (setup >> 2) & 1 ? 1 % ranks : 0;
  hvd::ControllerOptions options;
  options.cache_capacity = (setup >> 3) & 1 ? 4 : 64;  // small: evictions happen
  options.stall_check_seconds = 1.0;
  options.stall_shutdown_seconds = (setup >> 4) & 1 ? 3.0 : 0.0;
  double now = 0;
  ScriptedPlane plane(&in, rank, ranks);
  hvd::Controller controller(&plane, options, [&now] { return now; });
  for (int cycle = 0; cycle < 8 && !in.empty(); ++cycle) {
    std::vector<hvd::Request> incoming;
    hvd::RequestList mine;
    if (hvd::deserialize(in.piece(), &mine).ok()) {
      for (auto& q : mine.requests) {
        q.rank = rank;
        incoming.push_back(std::move(q));
      }
    }
    now += in.byte();
    hvd::CycleResult result;
    if (!controller.run_cycle(std::move(incoming), mine.shutdown, &result).ok()) break;
    if (result.shutdown) break;
  }
  return 0;
}
