// Copyright horovod_cpp authors. One cycle of a process set: take the table's new requests,
// negotiate them with the other members, execute what every member agreed on.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/world.h"
#include "common/config.h"
#include "coordination/controller.h"
#include "core/executor.h"
#include "core/tensor_table.h"
#include "tuning/autotuner.h"

namespace hvd {

class Timeline;

/// The negotiation and execution of a set, one cycle per run(). Not thread-safe: one thread
/// at a time runs it (the scheduler's lock says which). Needs no thread of its own, so a
/// test can run the cycles of N in-process members from N threads of its own.
class Cycle {
 public:
  /// Over `planes` (which outlive it) and `table` (whose tensors it runs). `rank` is this
  /// rank's index in `global_ranks`.
  Cycle(int set_id, const std::vector<int>& global_ranks, int rank, SetPlanes* planes,
        TensorTable* table, const Config& config, Timeline* timeline);
  ~Cycle();
  Cycle(const Cycle&) = delete;
  Cycle& operator=(const Cycle&) = delete;

  /// One cycle. False once the set has stopped (shutdown agreed, coordination failed); the
  /// table is stopped then. Throws what a transport throws (Scheduler turns it into fail()).
  bool run();
  /// A fatal stop of the set naming it and `what`: reported (common/fatal.h; the other
  /// members may be waiting in a collective this rank left), and the table stopped.
  void fail(const std::string& what);

  /// The idle heartbeat's period (the autotuner may change it between cycles).
  double cycle_time_ms() const { return cycle_time_ms_.load(); }
  int global_rank() const { return global_ranks_[static_cast<size_t>(rank_)]; }
  /// "process set <id> (global ranks <...>)", for messages.
  std::string where() const;

 private:
  const int id_;
  const std::vector<int>& global_ranks_;
  const int rank_;
  SetPlanes* planes_;
  TensorTable* table_;
  Timeline* timeline_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Autotuner> autotuner_;  // HOROVOD_AUTOTUNE, global set only
  std::atomic<double> cycle_time_ms_;     // the autotuner may change it (in a cycle)
  std::unordered_map<std::string, int64_t> negotiating_;  // timeline: name -> start
  std::vector<Request> spare_requests_;                   // the next burst's vector
  size_t last_burst_ = 0;                                 // requests taken by the last busy cycle
};

}  // namespace hvd
