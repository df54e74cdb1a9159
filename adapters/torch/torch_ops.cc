// Copyright horovod_cpp authors. The gradient engine's tensor operations on LibTorch tensors.
#include "torch_ops.h"

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
