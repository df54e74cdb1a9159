// Copyright horovod_cpp authors.
#include "tuning/autotuner.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "common/logging.h"
#include "common/safe_file.h"

namespace hvd {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

SearchOptions search_options(const Config& c) {
  SearchOptions o;
  o.warmup_samples = static_cast<int>(c.autotune_warmup_samples);
  o.samples_per_trial = static_cast<int>(c.autotune_samples_per_trial);
  return o;
}

}  // namespace

std::vector<TunedKnob> Autotuner::default_knobs(const Config&) {
  // Fusion threshold first: it decides how many reductions a step costs. 0 = no fusion.
  return {{"fusion_threshold_mb", {0, 1, 4, 16, 32, 64, 128}},
          {"cycle_time_ms", {0.5, 1, 2, 5}}};
}

Autotuner::Autotuner(const Config& config, bool write_log, Agree agree, Apply apply)
    : search_(default_knobs(config),
              {static_cast<double>(config.fusion_threshold_bytes) / kMiB, config.cycle_time_ms},
              search_options(config)),
      agree_(std::move(agree)),
      apply_(std::move(apply)),
      steps_per_sample_(static_cast<int>(std::max<int64_t>(1, config.autotune_steps_per_sample))) {
  if (write_log && !config.autotune_log.empty()) {
    std::string error;
    log_.reset(open_for_write_nofollow(config.autotune_log, &error));
    if (!log_) {
      HVD_LOG(kWarning) << "autotune: HOROVOD_AUTOTUNE_LOG: " << error
                        << "; tuning goes on without a log";
    } else {
      log_line("trial,fusion_threshold_mb,cycle_time_ms,score_mb_per_s,best\n");
    }
  }
}

void Autotuner::log_line(const std::string& line) {
  if (!log_) return;
  std::fputs(line.c_str(), log_.get());
  std::fflush(log_.get());
}

Status Autotuner::after_cycle(int64_t allreduce_bytes, double now_s) {
  if (search_.done() || allreduce_bytes <= 0) return Status::OK();
  if (sample_start_s_ < 0) {  // the first cycle with data starts the clock
    sample_start_s_ = now_s;
    return Status::OK();
  }
  bytes_ += static_cast<double>(allreduce_bytes);
  if (++steps_ < steps_per_sample_) return Status::OK();
  double seconds = now_s - sample_start_s_, bytes = bytes_;
  HVD_RETURN_IF_ERROR(agree_(&seconds, &bytes));
  steps_ = 0;
  bytes_ = 0;
  sample_start_s_ = now_s;
  const bool changed = search_.record(seconds > 0 ? bytes / seconds : 0.0);
  for (; logged_trials_ < search_.trials().size(); ++logged_trials_) {
    log_trial(logged_trials_, search_.trials()[logged_trials_]);
  }
  if (changed) {
    const std::vector<double>& v = search_.current();
    apply_(static_cast<int64_t>(v[0] * kMiB), v[1]);
    if (search_.done()) {
      HVD_LOG(kInfo) << "autotune: done after " << search_.trials().size()
                     << " trials: HOROVOD_FUSION_THRESHOLD=" << static_cast<int64_t>(v[0] * kMiB)
                     << " HOROVOD_CYCLE_TIME=" << v[1] << " ("
                     << search_.best_score() / kMiB << " MiB/s)";
      std::ostringstream os;
      os << "best," << v[0] << "," << v[1] << "," << search_.best_score() / kMiB << ",1\n";
      log_line(os.str());
    } else {
      HVD_LOG(kDebug) << "autotune: trying fusion " << v[0] << " MiB, cycle " << v[1] << " ms";
    }
  }
  return Status::OK();
}

void Autotuner::log_trial(size_t index, const ParameterSearch::Trial& t) {
  if (!log_) return;
  std::ostringstream os;
  os << index << "," << t.values[0] << "," << t.values[1] << "," << std::setprecision(6)
     << t.score / kMiB << ",0\n";
  log_line(os.str());
}

}  // namespace hvd
