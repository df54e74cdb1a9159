// Copyright horovod_cpp authors. Autotune (HOROVOD_AUTOTUNE=1): the fusion threshold and the
// cycle time, tuned on the job's own steps.
//
// The background thread of the global process set calls after_cycle() once per coordination
// cycle with the bytes its allreduces moved. Every `steps_per_sample` cycles that moved data
// make one sample: bytes / seconds since the previous sample ended (so the time between steps,
// the framework's compute included, counts: the score is the job's throughput). At a sample's
// end every rank calls `agree`, a collective that makes the sample's seconds and bytes equal
// on every rank (the slowest rank's time); ranks count the same cycles (cycles are collective
// and every rank gets the same responses), so they call it together and, fed the same scores,
// ParameterSearch makes the same decisions everywhere. New values are applied through `apply`
// between two cycles, on every rank at the same cycle.
//
// Thread: only the owning process set's background thread touches an Autotuner.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/status.h"
#include "tuning/parameter_search.h"

namespace hvd {

class Autotuner {
 public:
  /// Makes `*seconds` and `*bytes` the same on every rank (a collective).
  using Agree = std::function<Status(double* seconds, double* bytes)>;
  /// Applies new values: fusion threshold (bytes) and cycle time (milliseconds).
  using Apply = std::function<void(int64_t fusion_threshold_bytes, double cycle_time_ms)>;

  /// Reads the starting values and the sampling settings from `config`. `write_log`: this rank
  /// writes config.autotune_log (rank 0 only).
  Autotuner(const Config& config, bool write_log, Agree agree, Apply apply);

  /// The candidates tried (in MiB and ms): see docs/running.md.
  static std::vector<TunedKnob> default_knobs(const Config& config);

  /// Call after every cycle, with the bytes its allreduces moved and a monotonic clock (s).
  Status after_cycle(int64_t allreduce_bytes, double now_s);
  bool done() const { return search_.done(); }
  const ParameterSearch& search() const { return search_; }

 private:
  void log_trial(size_t index, const ParameterSearch::Trial& t);
  void log_line(const std::string& line);  // one flushed line, when there is a log

  ParameterSearch search_;
  Agree agree_;
  Apply apply_;
  int steps_per_sample_;
  int steps_ = 0;
  double bytes_ = 0;
  double sample_start_s_ = -1;
  size_t logged_trials_ = 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_{nullptr, std::fclose};
};

}  // namespace hvd
