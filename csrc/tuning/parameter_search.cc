// Copyright horovod_cpp authors.
#include "tuning/parameter_search.h"

#include <algorithm>

namespace hvd {

ParameterSearch::ParameterSearch(std::vector<TunedKnob> knobs, std::vector<double> start,
                                 SearchOptions options)
    : knobs_(std::move(knobs)), options_(options), current_(std::move(start)) {
  options_.warmup_samples = std::max(0, options_.warmup_samples);
  options_.samples_per_trial = std::max(1, options_.samples_per_trial);
  current_.resize(knobs_.size(), 0.0);
  best_ = current_;
  done_ = knobs_.empty();
}

bool ParameterSearch::record(double score) {
  if (done_) return false;
  if (sample_in_trial_++ >= options_.warmup_samples) scores_.push_back(score);
  if (static_cast<int>(scores_.size()) < options_.samples_per_trial) return false;
  finish_trial();
  const std::vector<double> before = current_;
  advance();
  return current_ != before || done_;
}

void ParameterSearch::finish_trial() {
  std::vector<double> s = scores_;
  std::nth_element(s.begin(), s.begin() + static_cast<long>(s.size() / 2), s.end());
  Trial t{current_, s[s.size() / 2]};
  trials_.push_back(t);
  // The first trial (the starting values) sets the bar; later ones must beat it clearly.
  if (best_score_ < 0 || t.score > best_score_ * (1.0 + options_.min_gain)) {
    best_ = t.values;
    best_score_ = t.score;
  }
  scores_.clear();
  sample_in_trial_ = 0;
}

bool ParameterSearch::tried(const std::vector<double>& values, double* score) const {
  for (const Trial& t : trials_) {
    if (t.values == values) {
      *score = t.score;
      return true;
    }
  }
  return false;
}

void ParameterSearch::advance() {
  while (knob_ < knobs_.size()) {
    const std::vector<double>& cands = knobs_[knob_].candidates;
    while (candidate_ < cands.size()) {
      std::vector<double> next = best_;
      next[knob_] = cands[candidate_++];
      double known = 0;
      if (!tried(next, &known)) {
        current_ = next;
        return;
      }
    }
    ++knob_;
    candidate_ = 0;
  }
  done_ = true;
  current_ = best_;
}

}  // namespace hvd
