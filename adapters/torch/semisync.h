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
#include "csrc/training/semisync_schedule.h"

namespace hvd {
namespace torch {
namespace detail {

/// Runs DistributedOptimizer::step() for staleness > 0 or local_sgd_period > 0 (the schedule:
/// csrc/training/semisync_schedule.h), on LibTorch tensors.
class TorchSemiSync : public hvd::detail::SemiSyncSchedule {
 public:
  /// `params`: (name, tensor) of the parameters that require gradients. Validates the options.
  TorchSemiSync(::torch::optim::Optimizer& optimizer, std::vector<std::pair<std::string, at::Tensor>> params,
                const DistributedOptions& opts);
  /// Waits for the collectives still in flight (errors ignored).
  ~TorchSemiSync() override;

 private:
  struct Pending {
    std::vector<at::Tensor> send;  // one reduced copy per parameter (fp16 when compressed)
    std::vector<Handle> handles;
  };
  struct Average {
    std::vector<at::Tensor> targets, snapshot, mean;
    std::vector<Handle> handles;
    bool active = false;
  };
  void submit_gradients(const std::string& tag) override;
  void apply_oldest() override;
  size_t queued() const override { return queue_.size(); }
  void local_step() override { optimizer_.step(); }
  void average_now() override;
  void start_average() override;
  void finish_average() override;
  std::vector<std::pair<std::string, at::Tensor>> averaged_tensors();

  ::torch::optim::Optimizer& optimizer_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::deque<Pending> queue_;  // oldest first
  Average avg_;
};

}  // namespace detail
}  // namespace torch
}  // namespace hvd
