// Copyright horovod_cpp authors. hvd::DistributedOptimizer: the gradient engine
// (training/grad_reducer.h, training/semisync.h) on Parameter buffers (training/host_ops.h).
#include <memory>
#include <string>
#include <utility>

#include "horovod_cpp/errors.h"
#include "horovod_cpp/training.h"
#include "training/grad_reducer.h"
#include "training/host_ops.h"
#include "training/semisync.h"

namespace hvd {

namespace {
const char kWho[] = "DistributedOptimizer: ";
}

struct DistributedOptimizer::Engine {
  Engine(const std::shared_ptr<Optimizer>& inner, const ParameterList& params, const DistributedOptions& opts)
      : reducer(detail::HostOps(inner, params, opts.local_sgd_average_state), opts, kWho) {
    for (const auto& p : params) reducer.add(p, p->name());
  }
  detail::GradReducer<detail::HostOps> reducer;
  std::unique_ptr<detail::SemiSyncEngine<detail::HostOps>> semi;
};

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<Optimizer> optimizer, DistributedOptions options)
    : Optimizer(optimizer ? optimizer->parameters() : ParameterList{}), inner_(std::move(optimizer)),
      opts_(std::move(options)) {
  if (!inner_) throw InvalidArgumentError(std::string(kWho) + "the wrapped optimizer is null");
  detail::validate_distributed_options(opts_, kWho);
  bool any_sparse = false;
  for (const auto& p : params_) any_sparse |= p->grad_kind() == GradKind::kSparse;
  if (any_sparse && !opts_.sparse_as_dense && opts_.op != ReduceOp::kAverage && opts_.op != ReduceOp::kSum) {
    throw InvalidArgumentError(std::string(kWho) + "sparse gradients support op average or sum, not " +
                               reduce_op_name(opts_.op) + " (or set sparse_as_dense)");
  }
  check_parameters_consistent(params_, "DistributedOptimizer");
  engine_ = std::make_unique<Engine>(inner_, params_, opts_);
  if (detail::wants_semi_sync(opts_)) {
    std::vector<std::pair<std::string, ParameterPtr>> named;
    for (const auto& p : params_) named.emplace_back(p->name(), p);
    // Constructed to validate the options; a warm-up alone is synchronous.
    auto semi = std::make_unique<detail::SemiSyncEngine<detail::HostOps>>(
        detail::HostOps(inner_, params_, opts_.local_sgd_average_state), std::move(named), opts_, kWho);
    if (opts_.staleness != 0 || opts_.local_sgd_period != 0) engine_->semi = std::move(semi);
  }
  semi_ = engine_->semi != nullptr;
}

DistributedOptimizer::~DistributedOptimizer() = default;

size_t DistributedOptimizer::index_of(const std::string& name) const {
  for (size_t i = 0; i < engine_->reducer.size(); ++i) {
    if (engine_->reducer.slot(i).name == name) return i;
  }
  throw InvalidArgumentError(std::string(kWho) + "no parameter named '" + name + "'");
}

void DistributedOptimizer::mark_ready(Parameter& param) {
  auto& r = engine_->reducer;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r.slot(i).param.get() == &param) {
      r.mark_ready(i, semi_);
      return;
    }
  }
  throw InvalidArgumentError(std::string(kWho) + "mark_ready() of parameter '" + param.name() +
                             "', which this optimizer does not hold");
}

void DistributedOptimizer::mark_ready(const std::string& name) { engine_->reducer.mark_ready(index_of(name), semi_); }

void DistributedOptimizer::synchronize() {
  if (semi_) {
    throw InvalidArgumentError(std::string(kWho) + "synchronize() is not available with staleness or local SGD "
                               "(step() does the communication); use flush() to complete it");
  }
  engine_->reducer.synchronize();
}

void DistributedOptimizer::step() {
  if (semi_) {
    engine_->semi->step(steps_taken_);
  } else {
    engine_->reducer.synchronize();
    inner_->step();
  }
  engine_->reducer.end_step();
  ++steps_taken_;
}

void DistributedOptimizer::flush() {
  if (semi_) engine_->semi->flush();
}

void DistributedOptimizer::zero_grad() {
  engine_->reducer.zero_grad();
  inner_->zero_grad();
}

}  // namespace hvd
