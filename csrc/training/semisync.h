// Copyright horovod_cpp authors. Private: the semi-synchronous modes of DistributedOptimizer
// (bounded staleness, local SGD). Built on the public API only; see docs/training.md.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "horovod_cpp/training.h"
#include "training/semisync_schedule.h"

namespace hvd {
namespace detail {

/// Does the communication and the updates of DistributedOptimizer::step() when
/// DistributedOptions::staleness or local_sgd_period is set (the schedule:
/// training/semisync_schedule.h), on Parameter buffers. Owned by the DistributedOptimizer.
class SemiSyncEngine : public SemiSyncSchedule {
 public:
  /// Validates the semi-synchronous options (InvalidArgumentError naming the option).
  SemiSyncEngine(Optimizer& inner, ParameterList params, const DistributedOptions& opts);
  /// Waits for the collectives still in flight (they write into our buffers); errors ignored.
  ~SemiSyncEngine() override;

 private:
  // One step's gradients in flight: a reduced copy per parameter.
  struct Pending {
    std::vector<std::vector<float>> grads;
    std::vector<std::vector<uint16_t>> halves;  // fp16 compression
    std::vector<Handle> handles;
  };
  // An averaging of the parameters (and state) in flight: local SGD with overlap.
  struct Average {
    std::vector<std::vector<float>> snapshot, mean;
    std::vector<Handle> handles;
    bool active = false;
  };

  void submit_gradients(const std::string& tag) override;
  void apply_oldest() override;
  size_t queued() const override { return queue_.size(); }
  void local_step() override { inner_.step(); }
  void average_now() override;
  void start_average() override;
  void finish_average() override;
  std::vector<std::pair<std::string, TensorView>> averaged_tensors();

  Optimizer& inner_;
  ParameterList params_;
  std::deque<Pending> queue_;  // oldest first
  Average avg_;
};

}  // namespace detail
}  // namespace hvd
