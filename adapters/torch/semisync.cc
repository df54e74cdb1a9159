// Copyright horovod_cpp authors. Semi-synchronous modes of hvd::torch::DistributedOptimizer:
// bounded staleness (apply the averaged gradients of s steps earlier) and local SGD (average
// the parameters every k steps), on LibTorch tensors; the schedule is shared with
// hvd::DistributedOptimizer (csrc/training/semisync_schedule.cc).
#include "semisync.h"

#include <stdexcept>

namespace hvd {
namespace torch {
namespace detail {

TorchSemiSync::TorchSemiSync(::torch::optim::Optimizer& optimizer,
                             std::vector<std::pair<std::string, at::Tensor>> params, const DistributedOptions& opts)
    : SemiSyncSchedule(opts, "hvd::torch::DistributedOptimizer: "),
      optimizer_(optimizer),
      params_(std::move(params)) {}

TorchSemiSync::~TorchSemiSync() {
  for (auto& p : queue_) drain(p.handles);
  drain(avg_.handles);
}

void TorchSemiSync::submit_gradients(const std::string& tag) {
  ::torch::NoGradGuard no_grad;
  Pending p;
  const double pass_scale =
      opts_.average_aggregated_gradients ? 1.0 / static_cast<double>(opts_.backward_passes_per_step) : 1.0;
  AllreduceOptions ao;
  ao.op = opts_.op;
  if (opts_.op == ReduceOp::kAverage) {
    ao.prescale_factor = 1.0 / opts_.gradient_predivide_factor;
    ao.postscale_factor = opts_.gradient_predivide_factor;
  }
  for (auto& [name, param] : params_) {
    const at::Tensor& grad = param.grad();
    at::Tensor g;
    if (!grad.defined()) {
      g = at::zeros_like(param);
    } else if (grad.is_sparse()) {
      g = grad.to_dense();
    } else {
      g = grad.clone(at::MemoryFormat::Contiguous);  // ours: the next backward writes .grad()
    }
    if (pass_scale != 1.0) g.mul_(pass_scale);
    if (opts_.compression == Compression::kFP16 && g.is_floating_point() && g.scalar_type() != at::kHalf) {
      g = g.to(at::kHalf).contiguous();
    }
    p.handles.push_back(allreduce_async(opts_.name_prefix + "." + tag + "." + name, view(g), ao));
    p.send.push_back(std::move(g));
  }
  queue_.push_back(std::move(p));
}

void TorchSemiSync::apply_oldest() {
  // Left in the queue until applied: if a wait throws, the destructor still drains it.
  Pending& p = queue_.front();
  for (auto& h : p.handles) wait(h);
  {
    ::torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& param = params_[i].second;
      at::Tensor g = p.send[i].to(param.scalar_type());
      at::Tensor& grad = param.mutable_grad();
      if (grad.defined() && !grad.is_sparse() && grad.sizes() == g.sizes()) {
        grad.copy_(g);
      } else {
        grad = g;
      }
    }
  }
  queue_.pop_front();
  optimizer_.step();
}

std::vector<std::pair<std::string, at::Tensor>> TorchSemiSync::averaged_tensors() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [name, param] : params_) out.emplace_back("param." + name, param);
  if (!opts_.local_sgd_average_state) return out;
  auto& state = optimizer_.state();
  for (auto& [name, param] : params_) {
    auto it = state.find(optimizer_state_key(param));
    if (it == state.end()) continue;  // no state yet (the same on every rank: steps are in lockstep counts)
    auto* base = it->second.get();
    std::vector<std::pair<std::string, at::Tensor>> st;
    if (auto* s = dynamic_cast<::torch::optim::SGDParamState*>(base)) {
      st = {{"momentum_buffer", s->momentum_buffer()}};
    } else if (auto* s = dynamic_cast<::torch::optim::AdamParamState*>(base)) {
      st = {{"exp_avg", s->exp_avg()}, {"exp_avg_sq", s->exp_avg_sq()}, {"max_exp_avg_sq", s->max_exp_avg_sq()}};
    } else if (auto* s = dynamic_cast<::torch::optim::AdamWParamState*>(base)) {
      st = {{"exp_avg", s->exp_avg()}, {"exp_avg_sq", s->exp_avg_sq()}, {"max_exp_avg_sq", s->max_exp_avg_sq()}};
    } else if (auto* s = dynamic_cast<::torch::optim::AdagradParamState*>(base)) {
      st = {{"sum", s->sum()}};
    } else if (auto* s = dynamic_cast<::torch::optim::RMSpropParamState*>(base)) {
      st = {{"square_avg", s->square_avg()}, {"momentum_buffer", s->momentum_buffer()}, {"grad_avg", s->grad_avg()}};
    } else {
      throw InvalidArgumentError("hvd::torch::DistributedOptimizer: local_sgd_average_state supports the state of "
                                 "SGD, Adam, AdamW, Adagrad and RMSprop; parameter '" + name +
                                 "' has another optimizer's state");
    }
    for (auto& [key, t] : st) {
      if (t.defined() && t.numel() > 0 && t.is_floating_point()) out.emplace_back("state." + name + "." + key, t);
    }
  }
  return out;
}

void TorchSemiSync::average_now() {
  ::torch::NoGradGuard no_grad;
  auto ts = averaged_tensors();
  std::vector<Handle> hs;
  for (auto& [name, t] : ts) {
    if (!t.is_contiguous()) {
      throw InvalidArgumentError("hvd::torch::DistributedOptimizer: local SGD needs contiguous tensors ('" + name + "')");
    }
    hs.push_back(allreduce_async(opts_.name_prefix + ".local_sgd." + name, view(t)));
  }
  for (auto& h : hs) wait(h);
}

void TorchSemiSync::start_average() {
  ::torch::NoGradGuard no_grad;
  avg_ = Average();
  for (auto& [name, t] : averaged_tensors()) {
    at::Tensor snap = t.detach().clone(at::MemoryFormat::Contiguous);
    at::Tensor mean = at::empty_like(snap);
    avg_.handles.push_back(allreduce_async(opts_.name_prefix + ".local_sgd." + name, view(snap), view(mean)));
    avg_.targets.push_back(t);
    avg_.snapshot.push_back(snap);
    avg_.mean.push_back(mean);
  }
  avg_.active = true;
}

void TorchSemiSync::finish_average() {
  if (!avg_.active) return;
  ::torch::NoGradGuard no_grad;
  for (auto& h : avg_.handles) wait(h);
  for (size_t i = 0; i < avg_.targets.size(); ++i) {
    // The average plus what this rank has done since the snapshot.
    avg_.targets[i].copy_(avg_.mean[i] + (avg_.targets[i] - avg_.snapshot[i]));
  }
  avg_ = Average();
}

}  // namespace detail
}  // namespace torch
}  // namespace hvd
