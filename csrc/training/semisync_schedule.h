// Copyright horovod_cpp authors. Private: the schedule of the semi-synchronous modes (bounded
// staleness, local SGD) of both DistributedOptimizers. What each step submits, applies and
// averages is decided here once; the engine (training/semisync.h) says how, on a framework's
// tensors. Includes public headers only: the LibTorch adapter includes it too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/training.h"

namespace hvd {
namespace detail {

/// Bounded staleness s: step t submits this step's gradients under names that cycle over s + 1
/// slots, then applies the oldest submitted step while more than s are in flight (step t
/// applies the average of step t - s). Local SGD with period k: synchronous steps during the
/// warm-up, then local steps, and after every k-th the parameters (and state) are averaged, at
/// once or, with overlap, folded in at the next step.
class SemiSyncSchedule {
 public:
  /// Validates the semi-synchronous options; errors start with `who` (e.g.
  /// "DistributedOptimizer: ") and name the option.
  SemiSyncSchedule(const DistributedOptions& opts, const std::string& who);
  virtual ~SemiSyncSchedule() = default;

  /// The step of index t (0-based), with this step's gradients in the parameters.
  void step(int64_t t);
  /// Completes and applies everything pending (DistributedOptimizer::flush()).
  void flush();

 protected:
  /// Copies this step's gradients and starts their allreduce under `tag`; queued last.
  virtual void submit_gradients(const std::string& tag) = 0;
  /// Waits for the oldest queued step, writes its averaged gradients and steps the optimizer.
  virtual void apply_oldest() = 0;
  /// Steps submitted and not applied yet.
  virtual size_t queued() const = 0;
  /// One local step of the wrapped optimizer with this rank's own gradients.
  virtual void local_step() = 0;
  /// Averages the parameters (and state) now.
  virtual void average_now() = 0;
  /// Starts averaging a snapshot of the parameters (and state) asynchronously.
  virtual void start_average() = 0;
  /// Waits for start_average()'s averaging, if any, and folds it in.
  virtual void finish_average() = 0;

  /// Waits for `h` within the options' timeout (none: for ever).
  void wait(const Handle& h) const;
  /// Waits for every valid handle, ignoring failures (destructors).
  static void drain(std::vector<Handle>& handles);

  const DistributedOptions opts_;

 private:
  int64_t submitted_ = 0;  // staleness: steps submitted (names cycle over staleness + 1)
};

}  // namespace detail
}  // namespace hvd
