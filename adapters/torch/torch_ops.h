// Copyright horovod_cpp authors. Private: the tensor operations of the gradient engine
// (csrc/training/grad_reducer.h, csrc/training/semisync.h) on LibTorch tensors, for
// hvd::torch::DistributedOptimizer (defined in optimizer.cc). Callers hold a torch::NoGradGuard.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "horovod_cpp/torch.h"

namespace hvd {
namespace torch {
namespace detail {

/// "[2,3]": a tensor's sizes for messages.
inline std::string sizes_str(const at::Tensor& t) { return shape_str(Shape(t.sizes().begin(), t.sizes().end())); }

/// A parameter as the engine holds it (the tensor keeps its storage alive while in flight).
struct TorchParam {
  at::Tensor tensor;
  bool sparse_hint = false;  ///< reduced as an empty sparse gradient when it got none
};

/// The engine's Ops on at::Tensor (see hvd::detail::GradReducer and SemiSyncEngine for the
/// contract). Buffers are tensors: holding one keeps its storage alive.
class TorchOps {
 public:
  using Param = TorchParam;
  using Tensor = at::Tensor;

  /// `params`: (name, tensor) of the trainable parameters, whose values (and, with
  /// `average_state`, whose optimizer state) local SGD averages.
  TorchOps(::torch::optim::Optimizer& optimizer, std::vector<std::pair<std::string, at::Tensor>> params,
           bool average_state)
      : optimizer_(&optimizer), params_(std::move(params)), average_state_(average_state) {}

  bool trainable(const TorchParam& p) const { return p.tensor.requires_grad(); }
  bool sparse_grad(const TorchParam& p) const;
  void dense_grad(TorchParam& p, at::Tensor& out) const;
  void sparse_rows(TorchParam& p, double scale, at::Tensor& indices, at::Tensor& values) const;
  void scale(at::Tensor& t, double factor) const { t.mul_(factor); }
  bool compressible(const at::Tensor& t) const { return t.is_floating_point() && t.scalar_type() != at::kHalf; }
  void to_half(const at::Tensor& src, at::Tensor& out) const { out = src.to(at::kHalf).contiguous(); }
  void from_half(const at::Tensor& half, at::Tensor& dst) const { dst.copy_(half); }
  TensorView view(const at::Tensor& t) const { return hvd::torch::view(t); }
  void put_dense_grad(TorchParam& p, at::Tensor& reduced) const;
  void put_sparse_grad(TorchParam& p, const hvd::Tensor& indices, const hvd::Tensor& values) const;
  void release(at::Tensor& t) const { t = at::Tensor(); }

  // Semi-synchronous modes.
  void dense_grad_copy(const TorchParam& p, at::Tensor& out) const;
  void step() { optimizer_->step(); }
  std::vector<std::pair<std::string, at::Tensor>> averaged() const;
  void clone(const at::Tensor& src, at::Tensor& out) const { out = src.detach().clone(at::MemoryFormat::Contiguous); }
  void empty_like(const at::Tensor& src, at::Tensor& out) const { out = at::empty_like(src); }
  void fold(at::Tensor& target, const at::Tensor& mean, const at::Tensor& snapshot) const {
    target.copy_(mean + (target - snapshot));
  }

 private:
  ::torch::optim::Optimizer* optimizer_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  bool average_state_;
};

}  // namespace detail
}  // namespace torch
}  // namespace hvd
