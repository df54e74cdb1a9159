// Copyright horovod_cpp authors. Private: the semi-synchronous engine (bounded staleness, local
// SGD) of both DistributedOptimizers, over a framework's tensors (the Ops of
// training/grad_reducer.h plus the few below). The schedule, what each step submits, applies
// and averages, is training/semisync_schedule.h; this says how, once. Includes public headers
// only: the LibTorch adapter includes it too.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "horovod_cpp/training.h"
#include "training/grad_reducer.h"
#include "training/in_flight.h"
#include "training/semisync_schedule.h"

namespace hvd {
namespace detail {

/// Runs DistributedOptimizer::step() when DistributedOptions::staleness or local_sgd_period is
/// set. Besides GradReducer's operations, `Ops` has:
///   void dense_grad_copy(const Param&, Tensor& out)   a copy of this step's gradient (zeros if
///                                                      none, densified), contiguous
///   void step()                                        the wrapped optimizer's step
///   std::vector<std::pair<std::string, Tensor>> averaged()
///       what local SGD averages, in place: the parameters' values ("param.<name>") and, with
///       local_sgd_average_state, the optimizer's floating state ("state.<...>"); each Tensor
///       refers to (and keeps alive) the live storage
///   void clone(const Tensor&, Tensor& out); void empty_like(const Tensor&, Tensor& out)
///   void fold(Tensor& target, const Tensor& mean, const Tensor& snapshot)
///       target = mean + (target - snapshot)
/// Buffers in flight are owned by the engine; its destructor parks them (in_flight.h).
template <class Ops>
class SemiSyncEngine : public SemiSyncSchedule {
 public:
  using Param = typename Ops::Param;
  using Buffer = typename Ops::Tensor;

  /// `params`: (name, parameter) of the trainable parameters. Validates the options (errors
  /// start with `who`).
  SemiSyncEngine(Ops ops, std::vector<std::pair<std::string, Param>> params, const DistributedOptions& opts,
                 const std::string& who)
      : SemiSyncSchedule(opts, who), ops_(std::move(ops)), params_(std::move(params)) {}

  ~SemiSyncEngine() override {
    for (Pending& p : queue_) park_owned(p.handles, std::move(p));
    if (avg_.active) park_owned(avg_.handles, std::move(avg_));
  }

 private:
  // One step's gradients in flight: a reduced copy per parameter.
  struct Pending {
    std::vector<Buffer> grads, halves;  // halves: fp16 on the wire, where compressible
    std::vector<Handle> handles;
  };
  // An averaging of the parameters (and state) in flight: local SGD with overlap.
  struct Average {
    std::vector<Buffer> targets, snapshot, mean;
    std::vector<Handle> handles;
    bool active = false;
  };

  void submit_gradients(const std::string& tag) override {
    Pending p;
    const double pass = aggregated_pass_scale(opts_);
    const AllreduceOptions ao = gradient_allreduce_options(opts_);
    p.grads.resize(params_.size());
    p.halves.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      Buffer& g = p.grads[i];
      ops_.dense_grad_copy(params_[i].second, g);  // ours: the next backward writes the gradient
      if (pass != 1.0) ops_.scale(g, pass);
      const bool fp16 = opts_.compression == Compression::kFP16 && ops_.compressible(g);
      if (fp16) ops_.to_half(g, p.halves[i]);
      p.handles.push_back(allreduce_async(opts_.name_prefix + "." + tag + "." + params_[i].first,
                                          ops_.view(fp16 ? p.halves[i] : g), ao));
    }
    queue_.push_back(std::move(p));
  }

  void apply_oldest() override {
    // Left in the queue until applied: if a wait throws, the destructor parks it.
    Pending& p = queue_.front();
    for (auto& h : p.handles) wait(h);
    for (size_t i = 0; i < params_.size(); ++i) {
      if (opts_.compression == Compression::kFP16 && ops_.compressible(p.grads[i])) {
        ops_.from_half(p.halves[i], p.grads[i]);
      }
      ops_.put_dense_grad(params_[i].second, p.grads[i]);
    }
    queue_.pop_front();
    ops_.step();
  }

  size_t queued() const override { return queue_.size(); }
  void local_step() override { ops_.step(); }

  void average_now() override {
    auto ts = ops_.averaged();
    std::vector<Handle> hs;
    for (auto& t : ts) hs.push_back(allreduce_async(opts_.name_prefix + ".local_sgd." + t.first, ops_.view(t.second)));
    wait_all_or_park(hs, opts_.timeout, ts);  // in place: a timeout parks the live tensors
  }

  void start_average() override {
    avg_ = Average();
    for (auto& [name, t] : ops_.averaged()) {
      Buffer snap, mean;
      ops_.clone(t, snap);
      ops_.empty_like(snap, mean);
      avg_.handles.push_back(
          allreduce_async(opts_.name_prefix + ".local_sgd." + name, ops_.view(snap), ops_.view(mean)));
      avg_.targets.push_back(std::move(t));
      avg_.snapshot.push_back(std::move(snap));
      avg_.mean.push_back(std::move(mean));
    }
    avg_.active = true;
  }

  void finish_average() override {
    if (!avg_.active) return;
    for (auto& h : avg_.handles) wait(h);
    // The average, plus what this rank has done since the snapshot.
    for (size_t i = 0; i < avg_.targets.size(); ++i) ops_.fold(avg_.targets[i], avg_.mean[i], avg_.snapshot[i]);
    avg_ = Average();
  }

  Ops ops_;
  std::vector<std::pair<std::string, Param>> params_;
  std::deque<Pending> queue_;  // oldest first
  Average avg_;
};

}  // namespace detail
}  // namespace hvd
