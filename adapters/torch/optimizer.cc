// Copyright horovod_cpp authors. hvd::torch::DistributedOptimizer: autograd hooks and
// at::Tensor glue around the gradient engine (csrc/training/grad_reducer.h,
// csrc/training/semisync.h) with the LibTorch tensor operations of torch_ops.h, defined here.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "horovod_cpp/torch.h"
#include "torch_ops.h"
#include "training/grad_reducer.h"
#include "training/semisync.h"

// ------------------------------------------------------------------------------------------
// The engine's tensor operations on LibTorch tensors (torch_ops.h).

namespace hvd {
namespace torch {
namespace detail {

bool TorchOps::sparse_grad(const TorchParam& p) const {
  const at::Tensor& g = p.tensor.grad();
  return g.defined() ? g.is_sparse() : p.sparse_hint;
}

void TorchOps::dense_grad(TorchParam& p, at::Tensor& out) const {
  at::Tensor& grad = p.tensor.mutable_grad();
  if (!grad.defined()) {
    grad = at::zeros_like(p.tensor);
  } else if (grad.is_sparse()) {  // sparse_as_dense
    grad = grad.to_dense();
  } else if (!grad.is_contiguous()) {
    grad = grad.contiguous();
  }
  out = grad;  // reduced in place
}

void TorchOps::sparse_rows(TorchParam& p, double scale, at::Tensor& indices, at::Tensor& values) const {
  at::Tensor& grad = p.tensor.mutable_grad();
  if (!grad.defined()) {  // no rows on this rank: an empty sparse gradient, indices on the device too
    std::vector<int64_t> value_sizes{0};
    for (int64_t d = 1; d < p.tensor.dim(); ++d) value_sizes.push_back(p.tensor.size(d));
    grad = at::sparse_coo_tensor(at::empty({1, 0}, p.tensor.options().dtype(at::kLong)),
                                 at::empty(value_sizes, p.tensor.options()), p.tensor.sizes());
  }
  indices = grad._indices().t().contiguous();
  values = (grad._values() * scale).contiguous();
}

void TorchOps::put_dense_grad(TorchParam& p, at::Tensor& reduced) const {
  at::Tensor& grad = p.tensor.mutable_grad();
  if (grad.defined() && grad.is_same(reduced)) return;  // reduced in place
  at::Tensor g = reduced.to(p.tensor.scalar_type());
  if (grad.defined() && !grad.is_sparse() && grad.sizes() == g.sizes()) {
    grad.copy_(g);
  } else {
    grad = g;
  }
}

void TorchOps::put_sparse_grad(TorchParam& p, const hvd::Tensor& indices, const hvd::Tensor& values) const {
  at::Tensor idx = to_torch(indices).t();
  at::Tensor val = to_torch(values).to(p.tensor.scalar_type());
  p.tensor.mutable_grad() = at::sparse_coo_tensor(idx, val, p.tensor.sizes());
}

void TorchOps::dense_grad_copy(const TorchParam& p, at::Tensor& out) const {
  const at::Tensor& grad = p.tensor.grad();
  if (!grad.defined()) {
    out = at::zeros_like(p.tensor);
  } else if (grad.is_sparse()) {
    out = grad.to_dense();
  } else {
    out = grad.clone(at::MemoryFormat::Contiguous);
  }
}

std::vector<std::pair<std::string, at::Tensor>> TorchOps::averaged() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, param] : params_) out.emplace_back("param." + name, param);
  if (average_state_) {
    auto& state = optimizer_->state();
    for (const auto& [name, param] : params_) {
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
  }
  for (const auto& [name, t] : out) {
    if (!t.is_contiguous()) {
      throw InvalidArgumentError("hvd::torch::DistributedOptimizer: local SGD needs contiguous tensors ('" + name + "')");
    }
  }
  return out;
}

}  // namespace detail
}  // namespace torch
}  // namespace hvd

// ------------------------------------------------------------------------------------------
// DistributedOptimizer

namespace hvd {
namespace torch {

namespace {
const char kWho[] = "hvd::torch::DistributedOptimizer: ";
using Reducer = ::hvd::detail::GradReducer<detail::TorchOps>;
using SemiSync = ::hvd::detail::SemiSyncEngine<detail::TorchOps>;
}  // namespace

struct DistributedOptimizer::Impl {
  Impl(detail::TorchOps ops, const DistributedOptions& opts) : reducer(std::move(ops), opts, kWho) {}

  // Hooks may run on autograd threads.
  void mark_ready(size_t i) {
    std::lock_guard<std::mutex> lk(mu);
    ::torch::NoGradGuard no_grad;
    reducer.mark_ready(i, semi != nullptr);
  }

  std::mutex mu;  // guards everything below
  Reducer reducer;
  std::unique_ptr<SemiSync> semi;  // staleness / local SGD
  int64_t steps = 0;
  struct Hook {
    std::shared_ptr<::torch::autograd::Node> acc;  // the parameter's gradient accumulator
    uintptr_t key = 0;
  };
  std::vector<Hook> hooks;  // by slot; none for frozen parameters
};

namespace {

// Post-hook of a parameter's AccumulateGrad node: its .grad() is final for this pass.
class ReadyHook : public ::torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<DistributedOptimizer::Impl> impl, size_t index) : impl_(std::move(impl)), index_(index) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list& /*inputs*/) override {
    if (auto impl = impl_.lock()) impl->mark_ready(index_);
    return outputs;
  }

 private:
  std::weak_ptr<DistributedOptimizer::Impl> impl_;
  size_t index_;
};

std::vector<std::pair<std::string, at::Tensor>> names_of_optimizer(
    ::torch::optim::Optimizer& optimizer, const std::vector<std::pair<std::string, at::Tensor>>& named) {
  std::unordered_map<const void*, std::string> by_impl;
  for (const auto& kv : named) by_impl.emplace(kv.second.unsafeGetTensorImpl(), kv.first);
  std::vector<std::pair<std::string, at::Tensor>> out;
  size_t g = 0;
  for (auto& group : optimizer.param_groups()) {
    size_t i = 0;
    for (auto& p : group.params()) {
      auto it = by_impl.find(p.unsafeGetTensorImpl());
      if (it == by_impl.end()) {
        throw InvalidArgumentError("hvd::torch::DistributedOptimizer: parameter " + std::to_string(i) +
                                   " of parameter group " + std::to_string(g) + " (shape " + detail::sizes_str(p) +
                                   ") has no name: it is not among the named parameters given");
      }
      out.emplace_back(it->second, p);
      ++i;
    }
    ++g;
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> pairs_of(const ::torch::OrderedDict<std::string, at::Tensor>& d) {
  std::vector<std::pair<std::string, at::Tensor>> v;
  for (const auto& item : d) v.emplace_back(item.key(), item.value());
  return v;
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer, const ::torch::nn::Module& module,
                                           DistributedOptions options)
    : optimizer_(optimizer), opts_(std::move(options)) {
  auto named = pairs_of(module.named_parameters(true));
  init(names_of_optimizer(optimizer_, named));
  // Parameters of sparse embeddings (the module itself may be one; it need not be held by a
  // shared_ptr, so it is not listed through named_modules()).
  auto is_sparse_embedding = [](const ::torch::nn::Module& m) {
    if (auto* e = dynamic_cast<const ::torch::nn::EmbeddingImpl*>(&m)) return e->options.sparse();
    if (auto* e = dynamic_cast<const ::torch::nn::EmbeddingBagImpl*>(&m)) return e->options.sparse();
    return false;
  };
  auto mark = [this](const std::string& name) {
    for (size_t i = 0; i < impl_->reducer.size(); ++i) {
      if (impl_->reducer.slot(i).name == name) impl_->reducer.slot(i).param.sparse_hint = true;
    }
  };
  if (is_sparse_embedding(module)) mark("weight");
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    if (is_sparse_embedding(*item.value())) mark(item.key() + ".weight");
  }
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                                           DistributedOptions options)
    : optimizer_(optimizer), opts_(std::move(options)) {
  init(names_of_optimizer(optimizer_, pairs_of(named_parameters)));
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer, DistributedOptions options)
    : optimizer_(optimizer), opts_(std::move(options)) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  size_t g = 0;
  for (auto& group : optimizer_.param_groups()) {
    size_t i = 0;
    for (auto& p : group.params()) named.emplace_back("param_group." + std::to_string(g) + "." + std::to_string(i++), p);
    ++g;
  }
  init(named);
}

void DistributedOptimizer::init(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  ::hvd::detail::validate_distributed_options(opts_, kWho);
  std::vector<std::pair<std::string, std::string>> desc;
  for (const auto& kv : named) {
    desc.emplace_back(kv.first, "shape " + detail::sizes_str(kv.second) + " " + c10::toString(kv.second.scalar_type()));
  }
  check_consistent_across_ranks(desc, "hvd::torch::DistributedOptimizer", "parameter", opts_.timeout);

  std::vector<std::pair<std::string, at::Tensor>> trainable;
  for (const auto& kv : named) {
    if (kv.second.requires_grad()) trainable.push_back(kv);
  }
  auto ops = [&] { return detail::TorchOps(optimizer_, trainable, opts_.local_sgd_average_state); };
  impl_ = std::make_shared<Impl>(ops(), opts_);
  for (const auto& kv : named) impl_->reducer.add(detail::TorchParam{kv.second, false}, kv.first);
  impl_->hooks.resize(named.size());
  for (size_t i = 0; i < named.size(); ++i) {
    const at::Tensor& p = named[i].second;
    if (!p.requires_grad()) continue;
    if (!p.is_leaf()) throw InvalidArgumentError(kWho + ("parameter '" + named[i].first + "' is not a leaf tensor"));
    impl_->hooks[i].acc = ::torch::autograd::impl::grad_accumulator(p);
    if (!impl_->hooks[i].acc) {
      throw InvalidArgumentError(kWho + ("no gradient accumulator for '" + named[i].first + "'"));
    }
    impl_->hooks[i].key = impl_->hooks[i].acc->add_post_hook(std::make_unique<ReadyHook>(impl_, i));
  }
  if (::hvd::detail::wants_semi_sync(opts_)) {
    // Constructed to validate the options; a warm-up alone is synchronous.
    std::vector<std::pair<std::string, detail::TorchParam>> params;
    for (const auto& kv : trainable) params.emplace_back(kv.first, detail::TorchParam{kv.second, false});
    auto semi = std::make_unique<SemiSync>(ops(), std::move(params), opts_, kWho);
    if (opts_.staleness != 0 || opts_.local_sgd_period != 0) impl_->semi = std::move(semi);
  }
}

// The engine parks what is still in flight (it never blocks and never frees it); the hooks go
// first, so no new reduction starts.
DistributedOptimizer::~DistributedOptimizer() {
  if (!impl_) return;
  for (auto& h : impl_->hooks) {
    if (h.acc && h.key) h.acc->del_post_hook(h.key);
  }
}

void DistributedOptimizer::synchronize() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (impl_->semi) {
    throw InvalidArgumentError(std::string(kWho) + "synchronize() is not available with staleness or local SGD "
                               "(step() does the communication); use flush() to complete it");
  }
  ::torch::NoGradGuard no_grad;
  impl_->reducer.synchronize();
}

void DistributedOptimizer::step() {
  if (impl_->semi) {
    std::lock_guard<std::mutex> lk(impl_->mu);
    ::torch::NoGradGuard no_grad;
    impl_->semi->step(impl_->steps++);
    impl_->reducer.end_step();
    return;
  }
  synchronize();
  optimizer_.step();
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->reducer.end_step();
  ++impl_->steps;
}

void DistributedOptimizer::flush() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  ::torch::NoGradGuard no_grad;
  if (impl_->semi) impl_->semi->flush();
}

int64_t DistributedOptimizer::steps_taken() const { return impl_->steps; }

void DistributedOptimizer::zero_grad() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->reducer.zero_grad();
  }
  optimizer_.zero_grad();
}

size_t DistributedOptimizer::in_flight() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->reducer.in_flight();
}

void DistributedOptimizer::set_sparse(const std::string& name) {
  for (size_t i = 0; i < impl_->reducer.size(); ++i) {
    if (impl_->reducer.slot(i).name == name) {
      impl_->reducer.slot(i).param.sparse_hint = true;
      return;
    }
  }
  throw InvalidArgumentError(kWho + ("no parameter named '" + name + "'"));
}

}  // namespace torch
}  // namespace hvd
