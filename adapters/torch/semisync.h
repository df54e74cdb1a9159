// Copyright horovod_cpp authors. Private: the semi-synchronous modes (bounded staleness, local
// SGD) of hvd::torch::DistributedOptimizer; semantics as hvd::DistributedOptimizer's
// (horovod_cpp/training.h, docs/training.md).
#pragma once

#include <torch/torch.h>

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/torch.h"
#include "horovod_cpp/training.h"

namespace hvd {
namespace torch {
namespace detail {

/// Runs DistributedOptimizer::step() for staleness > 0 or local_sgd_period > 0.
class TorchSemiSync {
 public:
  /// `params`: (name, tensor) of the parameters that require gradients. Validates the options.
  TorchSemiSync(::torch::optim::Optimizer& optimizer, std::vector<std::pair<std::string, at::Tensor>> params,
                const DistributedOptions& opts);
  /// Waits for the collectives still in flight (errors ignored).
  ~TorchSemiSync();
  /// The step of index t (0-based), with the gradients now in .grad().
  void step(int64_t t);
  /// Completes and applies everything pending (see hvd::DistributedOptimizer::flush()).
  void flush();

 private:
  struct Pending {
    std::vector<at::Tensor> send;  // one reduced copy per parameter (fp16 when compressed)
    std::vector<Handle> handles;
  };
  struct Average {
    std::vector<at::Tensor> targets, snapshot, mean;
    std::vector<Handle> handles;
  };
  Pending submit_gradients(const std::string& tag);
  void apply(Pending& p);
  void wait(const Handle& h) const;
  std::vector<std::pair<std::string, at::Tensor>> averaged_tensors();
  void average_now();
  void start_average();
  void finish_average();

  ::torch::optim::Optimizer& optimizer_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  DistributedOptions opts_;
  std::deque<Pending> queue_;
  int64_t submitted_ = 0;
  Average avg_;
  bool avg_active_ = false;
};

}  // namespace detail
}  // namespace torch
}  // namespace hvd
