// Copyright horovod_cpp authors. The schedule of the semi-synchronous modes.
//
// Waiting for step t - s's allreduce is bounded staleness's only synchronization: it
// completes only when every rank has submitted step t - s, which bounds how far a rank can run
// ahead, and every rank applies the same reduced gradients in the same order.
#include "training/semisync_schedule.h"

#include "horovod_cpp/errors.h"

namespace hvd {
namespace detail {
namespace {

void require_non_negative(const std::string& who, const char* option, int value) {
  if (value < 0) {
    throw InvalidArgumentError(who + option + " must be >= 0, got " + std::to_string(value));
  }
}

}  // namespace

SemiSyncSchedule::SemiSyncSchedule(const DistributedOptions& opts, const std::string& who)
    : opts_(opts) {
  require_non_negative(who, "staleness", opts_.staleness);
  require_non_negative(who, "local_sgd_period", opts_.local_sgd_period);
  require_non_negative(who, "local_sgd_warmup_steps", opts_.local_sgd_warmup_steps);
  if (opts_.staleness > 0 && opts_.local_sgd_period > 0) {
    throw InvalidArgumentError(who + "staleness (" + std::to_string(opts_.staleness) +
                               ") and local_sgd_period (" + std::to_string(opts_.local_sgd_period) +
                               ") cannot both be set; choose one semi-synchronous mode");
  }
}

void SemiSyncSchedule::wait(const Handle& h) const {
  if (opts_.timeout.count() > 0) {
    h.wait(opts_.timeout);
  } else {
    h.wait();
  }
}

void SemiSyncSchedule::drain(std::vector<Handle>& handles) {
  for (auto& h : handles) {
    if (!h.valid()) continue;
    try {
      h.wait();
    } catch (...) {
    }
  }
}

void SemiSyncSchedule::step(int64_t t) {
  if (opts_.staleness > 0) {
    const int64_t slot = submitted_++ % (opts_.staleness + 1);
    submit_gradients("stale" + std::to_string(slot));
    while (queued() > static_cast<size_t>(opts_.staleness)) apply_oldest();
    return;
  }
  // Local SGD.
  if (t < opts_.local_sgd_warmup_steps) {  // synchronous warm-up
    submit_gradients("warmup");
    apply_oldest();
    return;
  }
  finish_average();  // overlap: fold in the averaging started after the previous step
  local_step();
  if ((t + 1 - opts_.local_sgd_warmup_steps) % opts_.local_sgd_period == 0) {
    if (opts_.local_sgd_overlap) {
      start_average();
    } else {
      average_now();
    }
  }
}

void SemiSyncSchedule::flush() {
  if (opts_.staleness > 0) {
    while (queued() > 0) apply_oldest();
    submitted_ = 0;
    return;
  }
  finish_average();
  average_now();
}

}  // namespace detail
}  // namespace hvd
