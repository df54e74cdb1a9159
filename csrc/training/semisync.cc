// Copyright horovod_cpp authors. Semi-synchronous training: the bounded-staleness and local-SGD
// modes of DistributedOptimizer on Parameter buffers (the schedule, shared with the LibTorch
// adapter, is training/semisync_schedule.cc), and StepGuard. Built on the public asynchronous
// collectives.
//
// Local SGD averages the parameters (and optionally the float32 optimizer state), either at
// once or, with overlap, by an asynchronous allreduce of a snapshot folded in at the next step.
#include "training/semisync.h"

#include <algorithm>
#include <utility>

#include "horovod_cpp/errors.h"

namespace hvd {
namespace detail {

SemiSyncEngine::SemiSyncEngine(Optimizer& inner, ParameterList params, const DistributedOptions& opts)
    : SemiSyncSchedule(opts, "DistributedOptimizer: "), inner_(inner), params_(std::move(params)) {}

SemiSyncEngine::~SemiSyncEngine() {
  for (auto& p : queue_) drain(p.handles);
  drain(avg_.handles);
}

void SemiSyncEngine::submit_gradients(const std::string& tag) {
  Pending p;
  const double pass_scale =
      opts_.average_aggregated_gradients ? 1.0 / static_cast<double>(opts_.backward_passes_per_step) : 1.0;
  AllreduceOptions ao;
  ao.op = opts_.op;
  if (opts_.op == ReduceOp::kAverage) {
    ao.prescale_factor = 1.0 / opts_.gradient_predivide_factor;
    ao.postscale_factor = opts_.gradient_predivide_factor;
  }
  const bool fp16 = opts_.compression == Compression::kFP16;
  p.grads.resize(params_.size());
  if (fp16) p.halves.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& param = *params_[i];
    auto& g = p.grads[i];
    g = param.grad_as_dense();  // zeros when this rank has no gradient for it
    if (pass_scale != 1.0) {
      for (auto& v : g) v = static_cast<float>(v * pass_scale);
    }
    const std::string name = opts_.name_prefix + "." + tag + "." + param.name();
    if (fp16) {
      auto& h = p.halves[i];
      h.resize(g.size());
      for (size_t j = 0; j < g.size(); ++j) h[j] = float_to_half(g[j]);
      p.handles.push_back(allreduce_async(name, TensorView(h.data(), DataType::kFloat16, param.shape()), ao));
    } else {
      p.handles.push_back(allreduce_async(name, TensorView(g.data(), DataType::kFloat32, param.shape()), ao));
    }
  }
  queue_.push_back(std::move(p));
}

void SemiSyncEngine::apply_oldest() {
  // Left in the queue until applied: if a wait throws, the destructor still drains it (the
  // allreduces write into its buffers).
  Pending& p = queue_.front();
  for (auto& h : p.handles) wait(h);
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& param = *params_[i];
    auto& g = p.grads[i];
    if (!p.halves.empty()) {
      for (size_t j = 0; j < g.size(); ++j) g[j] = half_to_float(p.halves[i][j]);
    }
    if (param.grad_kind() == GradKind::kDense) {
      param.dense_grad() = std::move(g);
    } else {  // reduced densified: handed back as one row per row
      std::vector<int64_t> rows(static_cast<size_t>(param.rows()));
      for (int64_t r = 0; r < param.rows(); ++r) rows[static_cast<size_t>(r)] = r;
      param.set_sparse_grad(std::move(rows), std::move(g));
    }
  }
  queue_.pop_front();
  inner_.step();
}

std::vector<std::pair<std::string, TensorView>> SemiSyncEngine::averaged_tensors() {
  std::vector<std::pair<std::string, TensorView>> out;
  for (auto& p : params_) out.emplace_back("param." + p->name(), p->value_view());
  if (opts_.local_sgd_average_state) {
    for (auto& e : inner_.state()) {
      if (e.view.dtype == DataType::kFloat32) out.emplace_back("state." + e.name, e.view);
    }
  }
  return out;
}

void SemiSyncEngine::average_now() {
  auto ts = averaged_tensors();
  std::vector<Handle> hs;
  for (auto& t : ts) hs.push_back(allreduce_async(opts_.name_prefix + ".local_sgd." + t.first, t.second));
  for (auto& h : hs) wait(h);
}

void SemiSyncEngine::start_average() {
  auto ts = averaged_tensors();
  avg_.snapshot.resize(ts.size());
  avg_.mean.resize(ts.size());
  avg_.handles.clear();
  for (size_t i = 0; i < ts.size(); ++i) {
    const float* src = static_cast<const float*>(ts[i].second.data);
    const size_t n = static_cast<size_t>(num_elements(ts[i].second.shape));
    avg_.snapshot[i].assign(src, src + n);
    avg_.mean[i].resize(n);
    avg_.handles.push_back(allreduce_async(
        opts_.name_prefix + ".local_sgd." + ts[i].first,
        TensorView(avg_.snapshot[i].data(), DataType::kFloat32, ts[i].second.shape),
        TensorView(avg_.mean[i].data(), DataType::kFloat32, ts[i].second.shape)));
  }
  avg_.active = true;
}

void SemiSyncEngine::finish_average() {
  if (!avg_.active) return;
  for (auto& h : avg_.handles) wait(h);
  auto ts = averaged_tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    float* dst = static_cast<float*>(ts[i].second.data);
    const auto& snap = avg_.snapshot[i];
    const auto& mean = avg_.mean[i];
    // The average, plus what this rank has done since the snapshot.
    for (size_t j = 0; j < snap.size(); ++j) dst[j] = mean[j] + (dst[j] - snap[j]);
  }
  avg_.handles.clear();
  avg_.active = false;
}

}  // namespace detail

// ------------------------------------------------------------------------------------------
// StepGuard

StepGuard::StepGuard(int staleness, std::string name, std::chrono::milliseconds timeout)
    : staleness_(staleness), name_(std::move(name)), timeout_(timeout) {
  if (staleness < 0) {
    throw InvalidArgumentError("StepGuard '" + name_ + "': staleness must be >= 0, got " + std::to_string(staleness));
  }
  bufs_ = new std::vector<int64_t>(static_cast<size_t>(staleness) + 1, 0);
  handles_.resize(static_cast<size_t>(staleness) + 1);
}

StepGuard::~StepGuard() {
  bool pending = false;
  for (auto& h : handles_) pending |= h.valid() && !h.poll();
  // An announcement still in flight writes into bufs_ when the other ranks get there: leave
  // the few bytes allocated rather than block in a destructor (call finish() to avoid this).
  if (!pending) delete bufs_;
}

int64_t StepGuard::step() {
  if (finished_) throw InvalidArgumentError("StepGuard '" + name_ + "': step() after finish()");
  const int64_t period = staleness_ + 1;
  const int64_t t = steps_;
  const size_t slot = static_cast<size_t>(t % period);
  (*bufs_)[slot] = 1;
  AllreduceOptions ao;
  ao.op = ReduceOp::kSum;
  handles_[slot] = allreduce_async(name_ + "." + std::to_string(slot),
                                   TensorView(&(*bufs_)[slot], DataType::kInt64, Shape{1}), ao);
  ++steps_;
  const int64_t must = t - staleness_;  // every rank must have started this step
  if (must >= known_) {
    const Handle& h = handles_[static_cast<size_t>(must % period)];
    if (timeout_.count() > 0) {
      h.wait(timeout_);
    } else {
      h.wait();
    }
    known_ = must + 1;
  }
  // Learn more without waiting: later announcements that have already completed.
  while (known_ < steps_ && handles_[static_cast<size_t>(known_ % period)].poll()) {
    handles_[static_cast<size_t>(known_ % period)].wait();  // rethrows a failure
    ++known_;
  }
  return t;
}

int StepGuard::finish() {
  finished_ = true;
  // Our announcements first: each completes once every rank has made it or joined (a rank
  // with fewer steps: the others reach its last steps; the rank with the most: the others have
  // joined), so nothing of ours is in flight when we join.
  for (; known_ < steps_; ++known_) {
    const Handle& h = handles_[static_cast<size_t>(known_ % (staleness_ + 1))];
    if (timeout_.count() > 0) {
      h.wait(timeout_);
    } else {
      h.wait();
    }
  }
  return join();
}

int64_t StepGuard::slowest_started() const { return known_; }

}  // namespace hvd
