// Copyright horovod_cpp authors. The autotuner's search: which knob values to try next.
//
// Pure: no clock, no MPI, no thread. It is fed one score per sample (higher is better: bytes
// reduced per second of real training steps) and answers which values to use. Every rank feeds
// it the same agreed scores (see autotuner.h), so every rank makes the same decisions at the
// same sample: the fusion plans stay identical everywhere.
//
// The search is coordinate-wise: knob by knob, in the order given, each candidate value is
// tried with the other knobs at their best so far. A trial discards its first
// `warmup_samples` (the change just happened: new buffer sizes, caches) and scores the median
// of the next `samples_per_trial`. A candidate replaces the current best only when it beats it
// by more than `min_gain` (noise must not move a good default). When every knob is done the
// best values are kept for the rest of the job.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hvd {

/// One tuned knob: its name (for the log) and the values to try.
struct TunedKnob {
  std::string name;
  std::vector<double> candidates;
};

struct SearchOptions {
  int warmup_samples = 1;     ///< samples discarded at the start of every trial
  int samples_per_trial = 3;  ///< samples whose median is the trial's score
  double min_gain = 0.03;     ///< relative gain needed to replace the best (3 %)
};

class ParameterSearch {
 public:
  /// One finished trial: the values of every knob, and the score (median of its samples).
  struct Trial {
    std::vector<double> values;
    double score = 0;
  };

  /// `start`: the values in use now (one per knob); they are the first trial, and win ties.
  ParameterSearch(std::vector<TunedKnob> knobs, std::vector<double> start, SearchOptions options);

  /// The values to run the next sample with.
  const std::vector<double>& current() const { return current_; }
  /// The best values found so far (all of the search once done()).
  const std::vector<double>& best() const { return best_; }
  double best_score() const { return best_score_; }
  bool done() const { return done_; }
  const std::vector<TunedKnob>& knobs() const { return knobs_; }
  /// Finished trials in order (for the CSV log).
  const std::vector<Trial>& trials() const { return trials_; }

  /// Records the score of one sample run with current(). Returns true when current() changed
  /// (a trial ended): the caller applies the new values before the next sample.
  bool record(double score);

 private:
  void finish_trial();
  /// Moves to the next untried candidate (or the next knob, or done); sets current_.
  void advance();
  bool tried(const std::vector<double>& values, double* score) const;

  std::vector<TunedKnob> knobs_;
  SearchOptions options_;
  std::vector<double> current_, best_;
  double best_score_ = -1;
  size_t knob_ = 0, candidate_ = 0;  // the next candidate to try
  int sample_in_trial_ = 0;
  std::vector<double> scores_;
  std::vector<Trial> trials_;
  bool done_ = false;
};

}  // namespace hvd
