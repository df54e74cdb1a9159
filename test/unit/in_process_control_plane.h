// Copyright horovod_cpp authors. An in-process ControlPlane: N ranks that are N threads of one
// process, and a harness that runs one Controller per thread for a scripted number of cycles.
//
// The hub checks the protocol as well as serving it: every rank must issue the same collective
// (and, for allreduce_and, the same vector length) at the same step, otherwise the step fails
// on every rank with a message saying which ranks disagreed. A rank whose controller diverges
// from the others (different cache, a full cycle on one rank only) is therefore caught at the
// exchange where it happens instead of corrupting later cycles. Every wait has a timeout, and a
// failure on any rank aborts the hub, so no bug can hang the suite.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/control_plane.h"
#include "coordination/controller.h"

namespace hvd {
namespace testing {

/// State shared by the N ranks of one in-process group.
class InProcessHub {
 public:
  explicit InProcessHub(int size, double timeout_seconds = 20.0);

  int size() const { return size_; }
  /// Makes every current and future wait fail with `why` (first reason wins).
  void abort(const std::string& why);
  bool aborted() const;

  /// One collective step: every rank deposits (kind, payload); once all have, `combine` (run by
  /// the last rank to arrive) maps the deposits to the results, and each rank gets its own.
  Status exchange(int rank, const std::string& kind, std::string payload,
                  const std::function<Status(std::vector<std::string>& in,
                                             std::vector<std::string>* out)>& combine,
                  std::string* result);

 private:
  const int size_;
  const double timeout_seconds_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;  // completed steps
  int arrived_ = 0;          // ranks that deposited in the current step
  int departed_ = 0;         // ranks that took their result of the previous step
  std::vector<std::string> kinds_, inputs_, outputs_;
  Status step_status_;
  std::string abort_reason_;
};

/// The ControlPlane of one rank of an InProcessHub.
class InProcessControlPlane : public ControlPlane {
 public:
  InProcessControlPlane(InProcessHub* hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  Status allreduce_and(std::vector<uint64_t>* words) override;
  Status gather(const std::string& mine, std::vector<std::string>* all) override;
  Status broadcast(std::string* blob) override;

  uint64_t allreduces() const { return allreduces_; }
  uint64_t gathers() const { return gathers_; }
  /// On rank 0: changes every blob it broadcasts, before the others get it (the fuzzers'
  /// corrupted rank 0). Set before the rank's first cycle.
  void set_broadcast_filter(std::function<void(std::string*)> f) { filter_ = std::move(f); }

 private:
  InProcessHub* hub_;
  int rank_;
  std::function<void(std::string*)> filter_;
  uint64_t allreduces_ = 0, gathers_ = 0;
};

// ------------------------------------------------------------------------------------------
// The harness.

/// What a rank does in one cycle. The harness sets each request's `rank`.
struct CycleInput {
  std::vector<Request> requests;
  bool shutdown = false;
  uint64_t votes = 0;  ///< Controller::set_votes() before the cycle
};

/// The scripted run: `input(rank, cycle)` gives each rank's submissions. `clock_at(cycle)` (if
/// set) is the injected clock every controller reads during that cycle.
struct Script {
  int ranks = 2;
  int cycles = 1;
  ControllerOptions options;
  std::function<CycleInput(int rank, int cycle)> input;
  std::function<double(int cycle)> clock_at;
  /// Stop a rank after the first cycle whose result says shutdown (the runtime does).
  bool stop_on_shutdown = true;
  /// If set: each rank's Controller::set_response_check(response_check(rank)).
  std::function<Controller::ResponseCheck(int rank)> response_check;
};

/// One rank's view after one cycle.
struct CycleRecord {
  CycleResult result;
  uint64_t full_cycles = 0;
  uint32_t cache_size = 0;
  uint32_t cache_bits = 0;
  bool has_pending = false;
  std::string stall_report;
};

struct RunResult {
  /// records[rank][cycle], for the cycles the rank ran.
  std::vector<std::vector<CycleRecord>> records;
  /// Failures of any rank: a failed Status, an exception, a hub timeout. Empty on success.
  std::vector<std::string> errors;
  /// The controllers after the run (for cache inspection), indexed by rank.
  std::vector<std::unique_ptr<Controller>> controllers;
  std::vector<std::unique_ptr<InProcessControlPlane>> planes;
  std::unique_ptr<InProcessHub> hub;

  /// All responses rank `rank` got, over all cycles, in order.
  std::vector<Response> all_responses(int rank) const;
  /// The cycle in which rank `rank` first got a response named `name` (-1 if never).
  int cycle_of(int rank, const std::string& name) const;
};

RunResult run_script(const Script& script);

/// "allreduce 'a' [ok]"-style one-line description of a response list, for failure messages.
std::string describe(const std::vector<Response>& responses);

}  // namespace testing
}  // namespace hvd
