// Copyright horovod_cpp authors. Private: the semi-synchronous modes of DistributedOptimizer
// (bounded staleness, local SGD). Built on the public API only; see docs/training.md.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "horovod_cpp/training.h"

namespace hvd {
namespace detail {

/// Does the communication and the updates of DistributedOptimizer::step() when
/// DistributedOptions::staleness or local_sgd_period is set. Owned by the DistributedOptimizer.
class SemiSyncEngine {
 public:
  /// Validates the semi-synchronous options (InvalidArgumentError naming the option).
  SemiSyncEngine(Optimizer& inner, ParameterList params, const DistributedOptions& opts);
  /// Waits for the collectives still in flight (they write into our buffers); errors ignored.
  ~SemiSyncEngine();

  /// The step of index t (0-based) with the gradients now in the parameters.
  void step(int64_t t);
  /// Completes every pending communication and applies it (see DistributedOptimizer::flush).
  void flush();

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

  Pending submit_gradients(const std::string& tag);
  void apply(Pending& p);
  void wait(const Handle& h) const;
  std::vector<std::pair<std::string, TensorView>> averaged_tensors();
  void average_now();
  void start_average();
  void finish_average();

  Optimizer& inner_;
  ParameterList params_;
  DistributedOptions opts_;
  std::deque<Pending> queue_;  // staleness: oldest first
  int64_t submitted_ = 0;      // staleness: steps submitted (names cycle over staleness+1)
  Average avg_;
};

}  // namespace detail
}  // namespace hvd
